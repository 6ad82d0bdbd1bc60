"""Compaction of transactional data (Kafka's CleanedTransactionMetadata): aborted records go at once and
never shadow committed values; markers stay while their transaction has a batch left, then wait out
delete.retention.ms like tombstones."""

from __future__ import annotations

from test_cleaner import NOW, batches, clean, k, open_log

from klamm.protocol.batch import read_batch_header, split_batches
from klamm.protocol.records import ControlRecordType, build_batch, build_control_batch, control_type_of, decode_batch
from klamm.storage.cleaner import DELETE_HORIZON_FLAG, CompactionConfig
from klamm.storage.log import Log

RETENTION = 5000
CONFIG = CompactionConfig(min_cleanable_ratio=0.0, delete_retention_ms=RETENTION)
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


class Producer:
    def __init__(self, log: Log, producer_id: int) -> None:
        self.log, self.producer_id, self.sequence = log, producer_id, 0

    def send(self, records: list[tuple[bytes, bytes | None]]) -> None:
        buf = bytearray(build_batch(records, producer_id=self.producer_id, producer_epoch=0,
                                    base_sequence=self.sequence, transactional=True, timestamp_ms=NOW - 1000))
        self.sequence += len(records)
        self.log.append(buf, split_batches(buf), leader_epoch=0)

    def end(self, control: ControlRecordType) -> None:
        buf = bytearray(build_control_batch(control, producer_id=self.producer_id, producer_epoch=0,
                                            coordinator_epoch=0, timestamp_ms=NOW - 1000))
        self.log.append(buf, split_batches(buf), leader_epoch=0)


def plain(log: Log, records: list[tuple[bytes, bytes | None]]) -> None:
    buf = bytearray(build_batch(records, timestamp_ms=NOW - 1000))
    log.append(buf, split_batches(buf), leader_epoch=0)


def records(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """Data records from the log start (control batches left out)."""
    return [(r.offset, r.key, r.value) for data in batches(log) if not read_batch_header(data).is_control
            for r in decode_batch(data, check_crc=True)[1]]


def markers(log: Log) -> list[tuple[int, str, bool]]:
    """(offset, type, has a delete horizon) of every control batch that still holds its marker."""
    out = []
    for data in batches(log):
        header = read_batch_header(data)
        if header.is_control and header.records_count:
            out.append((header.base_offset, control_type_of(data).name,
                        bool(header.attributes & DELETE_HORIZON_FLAG)))
    return out


def txn_index(log: Log) -> list[tuple[int, int, int]]:
    return [(t.producer_id, t.first_offset, t.last_offset) for s in log.segments for t in s.txn_index.entries]


def build(tmp_path) -> tuple[Log, dict[int, Producer]]:
    log = open_log(tmp_path)
    p = {pid: Producer(log, pid) for pid in (10, 11, 12)}
    plain(log, [(k(1), b"a")])                      # 0
    p[10].send([(k(1), b"b"), (k(2), b"b")])        # 1-2 committed
    p[10].end(COMMIT)                               # 3
    p[11].send([(k(1), b"x"), (k(3), b"x")])        # 4-5 aborted: must not shadow k1=b
    p[11].end(ABORT)                                # 6
    plain(log, [(k(2), None)])                      # 7 tombstone
    plain(log, [(k(4), b"c")])                      # 8
    p[12].send([(k(4), b"y")])                      # 9 aborted: must not shadow k4=c
    p[12].end(ABORT)                                # 10
    plain(log, [(k(6), b"d")])                      # 11
    log.roll()
    # later transactions of the same producers, so none of the batches above is a producer's last
    for pid in (10, 11, 12):
        p[pid].send([(k(9), f"later {pid}".encode())])
        p[pid].end(COMMIT)
    assert log.log_end_offset == 18
    return log, p


def test_aborted_records_go_and_markers_stay_while_their_transaction_has_batches(tmp_path):
    log, _ = build(tmp_path)
    assert txn_index(log) == [(11, 4, 6), (12, 9, 10)]
    clean(log, CONFIG)
    assert records(log)[:4] == [(1, k(1), b"b"), (7, k(2), None), (8, k(4), b"c"), (11, k(6), b"d")]
    # every marker read a batch of its transaction in this pass: all kept, no horizon yet
    assert markers(log)[:3] == [(3, "COMMIT", False), (6, "ABORT", False), (10, "ABORT", False)]
    # the aborted batches are gone entirely (not their producers' last batches)
    assert [read_batch_header(d).base_offset for d in batches(log)][:6] == [1, 3, 6, 7, 8, 10]
    assert txn_index(log) == [(11, 4, 6), (12, 9, 10)]


def test_markers_without_batches_wait_for_delete_retention_then_go(tmp_path):
    log, _ = build(tmp_path)
    clean(log, CONFIG)
    # second pass: the abort markers' transactions have no batch left: stamped with a horizon,
    # and dropped from the transaction index; the commit marker's transaction still has k1=b
    clean(log, CONFIG)
    assert markers(log)[:3] == [(3, "COMMIT", False), (6, "ABORT", True), (10, "ABORT", True)]
    assert txn_index(log) == []
    clean(log, CONFIG, now=NOW + RETENTION - 1)
    assert markers(log)[:3] == [(3, "COMMIT", False), (6, "ABORT", True), (10, "ABORT", True)]
    later = NOW + RETENTION + 1
    clean(log, CONFIG, now=later)
    assert markers(log)[:1] == [(3, "COMMIT", False)]
    assert records(log)[:3] == [(1, k(1), b"b"), (8, k(4), b"c"), (11, k(6), b"d")]  # tombstone gone too


def test_commit_marker_goes_once_its_records_were_compacted_away(tmp_path):
    log, _ = build(tmp_path)
    clean(log, CONFIG)
    plain(log, [(k(1), b"newer")])  # supersedes k1=b, the commit's last record
    log.roll()
    clean(log, CONFIG)  # batch 1 emptied and dropped; its commit marker saw it in this pass
    assert (3, "COMMIT", False) in markers(log)
    clean(log, CONFIG)  # no batch of that transaction left
    assert (3, "COMMIT", True) in markers(log)
    clean(log, CONFIG, now=NOW + RETENTION + 1)
    assert [m for m in markers(log) if m[0] < 12] == []
    assert [r for r in records(log) if r[1] == k(1)] == [(18, k(1), b"newer")]


def test_aborted_txn_index_survives_a_restart(tmp_path):
    log, _ = build(tmp_path)
    clean(log, CONFIG)
    log.close()
    reopened = open_log(tmp_path)
    found = reopened.collect_aborted_txns(0, reopened.log_end_offset)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in found] == [(11, 4, 6), (12, 9, 10)]
