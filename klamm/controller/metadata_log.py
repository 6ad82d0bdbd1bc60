"""Where the controller keeps metadata records: the `__cluster_metadata` log.

The controller needs three things of it: append a list of record values
atomically (one batch) and learn their last offset, replay everything from the
start at startup, and close. `InMemoryMetadataLog` serves tests;
`FileMetadataLog` keeps Kafka v2 record batches (null keys, framed values, see
records.py) in `<log dir>/__cluster_metadata-0/` segments via klamm.storage.

A replicated (Raft) quorum will replace the append with "append, replicate,
wait for commit" behind the same protocol.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from klamm.controller.meta_properties import ensure_meta_properties  # re-exported for the broker
from klamm.protocol.batch import split_batches
from klamm.protocol.records import NewRecord, build_batch, decode_batch
from klamm.protocol.topics import METADATA_TOPIC
from klamm.storage.config import LogConfig
from klamm.storage.log import Log
from klamm.storage.log_manager import LogManager

__all__ = [
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "FileMetadataLog",
    "InMemoryMetadataLog",
    "MetadataLog",
    "ensure_meta_properties",
]

METADATA_PARTITION = 0
_READ_CHUNK = 1 << 20


class MetadataLog(Protocol):
    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets."""
        ...

    def append(self, records: Sequence[bytes]) -> int:
        """Append record values as one atomic batch, durably; return the last offset."""
        ...

    def replay(self, from_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        """(offset, value) of every record from `from_offset` on, in order."""
        ...

    def close(self) -> None: ...


class InMemoryMetadataLog:
    """A MetadataLog in a list; `batches` shows the atomic units appended."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, bytes]]] = []
        self._end = 0

    @property
    def end_offset(self) -> int:
        return self._end

    def append(self, records: Sequence[bytes]) -> int:
        if not records:
            raise ValueError("nothing to append")
        batch = [(self._end + i, bytes(value)) for i, value in enumerate(records)]
        self.batches.append(batch)
        self._end += len(batch)
        return self._end - 1

    def replay(self, from_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        for batch in self.batches:
            for offset, value in batch:
                if offset >= from_offset:
                    yield offset, value

    def close(self) -> None:
        pass


class FileMetadataLog:
    """The metadata log on disk, one record batch per append, fsynced before returning.

    Construct from the broker's LogManager (the log is `__cluster_metadata-0` in
    one of its dirs) or, for tools and tests, with `FileMetadataLog.open(log_dir)`.
    """

    def __init__(self, source: LogManager | Log) -> None:
        if isinstance(source, LogManager):
            log = source.get_log(METADATA_TOPIC, METADATA_PARTITION)
            if log is None:
                log = source.create_log(METADATA_TOPIC, METADATA_PARTITION, _metadata_log_config(LogConfig()))
        else:
            log = source
        # The metadata log is the cluster's state: never delete segments by age or
        # size, and fsync every append (as Kafka's Raft log does).
        log.config = _metadata_log_config(log.config)
        self.log = log
        self._owns_log = False  # a LogManager's log is closed by the LogManager

    @classmethod
    def open(cls, log_dir: Path | str, *, clean_shutdown: bool = True) -> FileMetadataLog:
        """Open `<log_dir>/__cluster_metadata-0` directly (no LogManager); close() closes it."""
        directory = Path(log_dir) / f"{METADATA_TOPIC}-{METADATA_PARTITION}"
        metadata_log = cls(Log.open(directory, _metadata_log_config(LogConfig()), clean_shutdown=clean_shutdown))
        metadata_log._owns_log = True
        return metadata_log

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, records: Sequence[bytes]) -> int:
        if not records:
            raise ValueError("nothing to append")
        buf = bytearray(build_batch([NewRecord(None, value) for value in records]))
        result = self.log.append(buf, split_batches(buf), leader_epoch=0)
        self.log.flush()
        return result.last_offset

    def replay(self, from_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        offset = max(from_offset, self.log.log_start_offset)
        while offset < self.log.log_end_offset:
            chunk = self.log.read_bytes(offset, _READ_CHUNK)
            if not chunk:
                break
            for header in split_batches(chunk):
                _, records = decode_batch(chunk, header.position, check_crc=True)
                for record in records:
                    if record.offset >= offset and record.value is not None:
                        yield record.offset, record.value
                offset = max(offset, header.next_offset)

    def close(self) -> None:
        if self._owns_log:
            self.log.close()
        else:
            self.log.flush()


def _metadata_log_config(config: LogConfig) -> LogConfig:
    return replace(config, retention_ms=-1, retention_bytes=-1, flush_messages=1)
