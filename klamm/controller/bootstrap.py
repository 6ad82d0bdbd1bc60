"""`bootstrap.checkpoint`: the records a new cluster's metadata log starts with (Kafka's BootstrapDirectory).

`klamm storage format --add-scram ...` writes the file into every log directory
it formats, as kafka-storage.sh does: the metadata.version FeatureLevelRecord,
then one UserScramCredentialRecord per --add-scram. Its content is a snapshot
file (klamm/controller/snapshot.py: header, record batches, footer) with id
0-0, Kafka's BOOTSTRAP_SNAPSHOT_ID. Without --add-scram klamm writes no file
(Kafka writes one always): a cluster then starts from the metadata.version
alone, as before.

The controller reads the file from the log directory that holds its metadata
log while that log is still empty, and the cluster's active controller appends
its records as the log's first batch (`Controller.bootstrap_if_empty`). Once
the log has records, the file is never read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from klamm.controller.records import MetadataRecord, MetadataRecordError, decode_record, encode_record
from klamm.controller.snapshot import SnapshotError, SnapshotId, parse_snapshot, write_snapshot_file

__all__ = ["BOOTSTRAP_FILE", "BootstrapError", "read_bootstrap", "write_bootstrap"]

BOOTSTRAP_FILE = "bootstrap.checkpoint"
_BOOTSTRAP_ID = SnapshotId(0, 0)


class BootstrapError(RuntimeError):
    """A bootstrap.checkpoint that cannot be read: the node refuses to start a cluster from it."""


def write_bootstrap(directory: Path, records: Sequence[MetadataRecord], now_ms: int) -> Path:
    """Write `records` as `<directory>/bootstrap.checkpoint` (durably); its path."""
    path = Path(directory) / BOOTSTRAP_FILE
    write_snapshot_file(path, _BOOTSTRAP_ID.epoch, [encode_record(r) for r in records], now_ms)
    return path


def read_bootstrap(directory: Path) -> list[MetadataRecord] | None:
    """The records of `<directory>/bootstrap.checkpoint`; None when there is no such file."""
    path = Path(directory) / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BootstrapError(f"{path}: {exc}") from exc
    try:
        snapshot = parse_snapshot(data, _BOOTSTRAP_ID, str(path))
        return [decode_record(value) for value in snapshot.values]
    except (SnapshotError, MetadataRecordError) as exc:
        raise BootstrapError(str(exc)) from exc
