"""`klamm dump-log`: kafka-dump-log.sh (DumpLogSegments), reading segment files offline.

    klamm dump-log --files 00000000000000000000.log,00000000000000000000.index,...
                   [--deep-iteration] [--print-data-log] [--index-sanity-check] [--verify-index-only]

.log files print one line per batch (and with --deep-iteration one per record);
.index files "offset: N position: P"; .timeindex files "timestamp: T offset: N".
Index entries are checked against the segment's .log, mismatches are reported on
stderr as Kafka does. The formats are klamm's = Kafka's (klamm.storage.segment,
klamm.storage.index, klamm.protocol.batch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from klamm.protocol import java_utf8
from klamm.protocol.batch import (ATTR_TIMESTAMP_TYPE, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, InvalidBatch,
                                  crc_ok, peek_offset_and_length, read_batch_header)
from klamm.protocol.compression import Compression
from klamm.protocol.errors import KafkaError
from klamm.protocol.records import ControlRecordType, Record, decode_batch, decode_control_record
from klamm.storage.index import CorruptIndex, OffsetIndex, TimeIndex

ATTR_DELETE_HORIZON = 0x40  # Kafka's DELETE_HORIZON_FLAG_MASK: base timestamp is the delete horizon
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
_NO_LIMIT = 1 << 62


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--files", required=True, help="comma-separated .log, .index and .timeindex files")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not only batches")
    parser.add_argument("--print-data-log", action="store_true", help="print keys and values (implies --deep-iteration)")
    parser.add_argument("--skip-record-metadata", action="store_true", help="print no record metadata")
    parser.add_argument("--index-sanity-check", action="store_true", help="only check the indexes' sanity")
    parser.add_argument("--verify-index-only", action="store_true", help="check index entries, print none")
    parser.add_argument("--max-bytes", type=int, default=None, help="read at most this many bytes of a .log")


@dataclass
class Problems:
    """What DumpLogSegments reports on stderr after dumping every file."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    errors: int = 0

    def print(self) -> None:
        for name, pairs in self.index_mismatches.items():
            _err(f"Mismatches in :{name}")
            for index_offset, log_offset in pairs:
                _err(f"  Index offset: {index_offset}, log offset: {log_offset}")
        for name, pairs in self.time_mismatches.items():
            _err(f"Found timestamp mismatch in :{name}")
            for index_ts, log_ts in pairs:
                _err(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}")
        for name, pairs in self.out_of_order.items():
            _err(f"Found out of order timestamp in :{name}")
            for index_ts, previous in pairs:
                _err(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}")
        for pairs in self.not_found.values():
            _err("The following indexed offsets are not found in the log.")
            for index_offset, log_offset in pairs:
                _err(f"Indexed offset: {index_offset}, found log offset: {log_offset}")
        for name, pairs in self.non_consecutive.items():
            _err(f"Non-consecutive offsets in {name}")
            for first, second in pairs:
                _err(f"  {first} is followed by {second}")


def run(args: argparse.Namespace) -> int:
    problems = Problems()
    for name in (f for f in args.files.split(",") if f.strip()):
        path = Path(name.strip())
        print(f"Dumping {path}")
        try:
            dump_file(path, args, problems)
        except BrokenPipeError:
            raise
        except (OSError, CorruptIndex, InvalidBatch) as exc:
            _err(f"klamm dump-log: {path}: {exc}")
            problems.errors += 1
    sys.stdout.flush()
    problems.print()
    return 1 if problems.errors else 0


def dump_file(path: Path, args: argparse.Namespace, problems: Problems) -> None:
    if path.suffix == ".log":
        dump_log(path, args, problems)
    elif path.suffix == ".index":
        dump_index(path, args, problems)
    elif path.suffix == ".timeindex":
        dump_time_index(path, args, problems)
    else:
        _err(f"Ignoring unknown file {path}")


def _err(text: str) -> None:
    print(text, file=sys.stderr)


def base_offset_of(path: Path) -> int:
    return int(path.name.split(".")[0])


# -------------------------------------------------------------------------- .log


def iter_batches(fd: int, limit: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, whole batch bytes) of each complete batch in the file, up to `limit` bytes.

    Stops at the first incomplete or malformed batch, like Kafka's FileRecords batch iterator.
    """
    size = min(os.fstat(fd).st_size, limit)
    position = 0
    while position + LOG_OVERHEAD <= size:
        _, batch_length = peek_offset_and_length(os.pread(fd, LOG_OVERHEAD, position), 0)
        total = batch_length + LOG_OVERHEAD
        if batch_length < HEADER_SIZE - LOG_OVERHEAD or position + total > size:
            return
        data = os.pread(fd, total, position)
        try:
            header = read_batch_header(data, 0)
        except InvalidBatch:
            return
        header.position = position
        yield header, data
        position += total


def dump_log(path: Path, args: argparse.Namespace, problems: Problems) -> None:
    print(f"Log starting offset: {base_offset_of(path)}")
    deep = args.deep_iteration or args.print_data_log
    limit = args.max_bytes if args.max_bytes is not None else _NO_LIMIT
    valid_bytes = 0
    last_offset = -1
    with open(path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        for header, data in iter_batches(f.fileno(), limit):
            print(batch_line(header, crc_ok(data, _at_zero(header)), valid_bytes))
            if deep:
                last_offset = dump_records(path, header, data, args, problems, last_offset)
            valid_bytes += header.size
    trailing = file_size - valid_bytes
    if trailing > 0 and args.max_bytes is None:
        print(f"Found {trailing} invalid bytes at the end of {path.name}")


def _at_zero(header: BatchHeader) -> BatchHeader:
    """The header with position 0: the batch's bytes were read into a buffer of their own."""
    copy = BatchHeader(**{f: getattr(header, f) for f in BatchHeader.__dataclass_fields__})
    copy.position = 0
    return copy


def timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.attributes & ATTR_TIMESTAMP_TYPE else "CreateTime"


def codec_name(header: BatchHeader) -> str:
    try:
        return Compression(header.compression).name.lower()
    except ValueError:
        return f"unknown({header.compression})"


def batch_line(header: BatchHeader, valid: bool, position: int) -> str:
    """printBatchLevel for a v2 batch."""
    horizon = (f"OptionalLong[{header.base_timestamp}]" if header.attributes & ATTR_DELETE_HORIZON
               else "OptionalLong.empty")
    return (f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.records_count}"
            f" baseSequence: {header.base_sequence} lastSequence: {header.last_sequence}"
            f" producerId: {header.producer_id} producerEpoch: {header.producer_epoch}"
            f" partitionLeaderEpoch: {header.partition_leader_epoch}"
            f" isTransactional: {_bool(header.is_transactional)} isControl: {_bool(header.is_control)}"
            f" deleteHorizonMs: {horizon}"
            f" position: {position} {timestamp_type(header)}: {header.max_timestamp} size: {header.size}"
            f" magic: {header.magic} compresscodec: {codec_name(header)} crc: {header.crc}"
            f" isvalid: {_bool(valid)}")


def _bool(value: bool) -> str:
    return "true" if value else "false"


def dump_records(path: Path, header: BatchHeader, data: bytes, args: argparse.Namespace, problems: Problems,
                 last_offset: int) -> int:
    """Print each record of one batch; returns the last offset seen (for the consecutiveness check)."""
    try:
        _, records = decode_batch(data, 0)
    except KafkaError as exc:
        _err(f"klamm dump-log: {path}: batch at position {header.position}: {exc}")
        problems.errors += 1
        return last_offset
    for record in records:
        if last_offset != -1 and record.offset != last_offset + 1:
            problems.non_consecutive.setdefault(str(path.resolve()), []).append((last_offset, record.offset))
        last_offset = record.offset
        print(record_line(header, record, args.print_data_log, args.skip_record_metadata))
    return last_offset


def record_sequence(header: BatchHeader, record: Record) -> int:
    if header.base_sequence < 0:
        return NO_SEQUENCE
    sequence = header.base_sequence + (record.offset - header.base_offset)
    return sequence - INT32_MAX - 1 if sequence > INT32_MAX else sequence


def record_line(header: BatchHeader, record: Record, print_data: bool, skip_metadata: bool) -> str:
    """One deep-iteration line: `| offset: ... headerKeys: [...]` plus key and payload with --print-data-log."""
    text = "| "
    separator = ""
    if not skip_metadata:
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        header_keys = ",".join(k for k, _ in record.headers)
        text += (f"offset: {record.offset} {timestamp_type(header)}: {record.timestamp} keySize: {key_size}"
                 f" valueSize: {value_size} sequence: {record_sequence(header, record)} headerKeys: [{header_keys}]")
        separator = " "
        if header.is_control:
            text += control_text(record)
    if print_data and not header.is_control:
        if record.key is not None:
            text += f"{separator}key: {_utf8(record.key)}"
            separator = " "
        if record.value is not None:
            text += f" payload: {_utf8(record.value)}"
    return text


RAFT_CONTROL_TYPES = {2: "LeaderChange", 3: "SnapshotHeader", 4: "SnapshotFooter", 5: "KRaftVersion", 6: "KRaftVoters"}


def control_text(record: Record) -> str:
    raft = _raft_control_text(record)
    if raft is not None:
        return raft
    try:
        control_type, coordinator_epoch = decode_control_record(record)
    except KafkaError:
        return " controlType: UNKNOWN(-1)"
    if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return f" endTxnMarker: {control_type.name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: {control_type.name}({int(control_type)})"


def _raft_control_text(record: Record) -> str | None:
    """KRaft's control records in `__cluster_metadata` (a LeaderChange opens each leader's epoch)."""
    if record.key is None or len(record.key) < 4:
        return None
    type_code = int.from_bytes(record.key[2:4], "big", signed=True)
    name = RAFT_CONTROL_TYPES.get(type_code)
    if name is None:
        return None
    if type_code == 2 and record.value is not None:
        try:
            return f" {name}: {json.dumps(leader_change(record.value), separators=(',', ':'))}"
        except (IndexError, ValueError):
            pass
    return f" controlType: {name}({type_code})"


def leader_change(value: bytes) -> dict[str, object]:
    """LeaderChangeMessage v0 (flexible): version, leader id, voters and granting voters, as Kafka prints it."""
    version, leader_id = int.from_bytes(value[0:2], "big"), int.from_bytes(value[2:6], "big", signed=True)
    position = 6
    arrays = []
    for _ in range(2):
        count, position = value[position] - 1, position + 1
        if count < 0 or value[position - 1] >= 0x80:
            raise ValueError("unexpected array length")
        voters = []
        for _ in range(count):
            voters.append({"voterId": int.from_bytes(value[position:position + 4], "big", signed=True)})
            position += 5  # the id and its (empty) tagged fields
        arrays.append(voters)
    return {"version": version, "leaderId": leader_id, "voters": arrays[0], "grantingVoters": arrays[1]}


def _utf8(data: bytes) -> str:
    # Kafka's StringDecoder: new String(bytes, UTF_8), each malformed sequence one U+FFFD (Python's "replace"
    # can give several for one).
    return java_utf8.decode(data)


# -------------------------------------------------------------------------- indexes


def log_batches(index_path: Path) -> list[BatchHeader]:
    """Batch headers of the index's segment .log ([] if there is none)."""
    log_path = index_path.with_suffix(".log")
    if not log_path.exists():
        return []
    with open(log_path, "rb") as f:
        return [header for header, _ in iter_batches(f.fileno(), _NO_LIMIT)]


def batch_at_or_after(batches: list[BatchHeader], offset: int) -> BatchHeader | None:
    return next((b for b in batches if b.last_offset >= offset), None)


def dump_index(path: Path, args: argparse.Namespace, problems: Problems) -> None:
    base = base_offset_of(path)
    index = OffsetIndex(path, base, max_index_bytes=1 << 31)
    index.load()
    if index.entries == 0:
        print(f"{path} is empty.")
        return
    batches = log_batches(path)
    if args.index_sanity_check:
        log_size = path.with_suffix(".log").stat().st_size if path.with_suffix(".log").exists() else 1 << 62
        index.sanity_check(log_size)
        print(f"{path} passed sanity check.")
        return
    by_position = {b.position: b for b in batches}
    for n in range(index.entries):
        relative, position = index.entry(n)
        if relative == 0 and n > 0:  # a zero entry: the rest of a preallocated file
            return
        offset = base + relative
        batch = by_position.get(position)
        if batches and (batch is None or batch.last_offset != offset):
            found = batch.last_offset if batch is not None else -1
            problems.index_mismatches.setdefault(str(path.resolve()), []).append((offset, found))
        if not args.verify_index_only:
            print(f"offset: {offset} position: {position}")


def dump_time_index(path: Path, args: argparse.Namespace, problems: Problems) -> None:
    base = base_offset_of(path)
    index = TimeIndex(path, base, max_index_bytes=1 << 31)
    index.load()
    batches = log_batches(path)
    if args.index_sanity_check:
        bound = batches[-1].next_offset if batches else 1 << 62
        index.sanity_check(bound)
        print(f"{path} passed sanity check.")
        return
    name = str(path.resolve())
    previous = -1
    for n in range(index.entries):
        timestamp, relative = index.entry(n)
        offset = base + relative
        if relative == 0 and n > 0:
            return
        if batches:
            check_time_entry(name, timestamp, offset, previous, batches, problems)
        if not args.verify_index_only:
            print(f"timestamp: {timestamp} offset: {offset}")
        previous = timestamp


def check_time_entry(name: str, timestamp: int, offset: int, previous: int, batches: list[BatchHeader],
                     problems: Problems) -> None:
    """The batch holding `offset` must end there and have `timestamp` as its max; timestamps must grow."""
    batch = batch_at_or_after(batches, offset)
    if batch is None:
        problems.not_found.setdefault(name, []).append((offset, -1))
    elif batch.last_offset != offset:
        problems.not_found.setdefault(name, []).append((offset, batch.last_offset))
    else:
        if batch.max_timestamp != timestamp:
            problems.time_mismatches.setdefault(name, []).append((timestamp, batch.max_timestamp))
        if previous >= timestamp:
            problems.out_of_order.setdefault(name, []).append((timestamp, previous))
