"""Transactions: the coordinator state machine (fake clock), producer state with open
transactions, the .txnindex file and its rebuild in recovery, and the LSO."""

from __future__ import annotations

import itertools
from pathlib import Path

from klamm.coordinator.timer import Timer
from klamm.coordinator.transactions.coordinator import TransactionCoordinator, TxnConfig, TxnResult
from klamm.coordinator.transactions.metadata import TxnState
from klamm.protocol.batch import split_batches
from klamm.protocol.errors import ErrorCode
from klamm.protocol.records import ControlRecordType, build_batch, build_control_batch
from klamm.storage.config import LogConfig
from klamm.storage.log import Log
from klamm.storage.txn_index import AbortedTxn, TransactionIndex


class Clock:
    def __init__(self) -> None:
        self.now = 1000

    def __call__(self) -> int:
        return self.now


def coordinator(clock: Clock) -> TransactionCoordinator:
    ids = itertools.count(100)
    c = TransactionCoordinator(TxnConfig(num_partitions=3, max_timeout_ms=60000), Timer(clock), lambda: next(ids))
    for p in range(3):
        c.begin_loading(p)
        c.finish_loading(p)
    return c


def run(c: TransactionCoordinator, result: TxnResult, markers: list | None = None):
    """What the runtime does: replay the records, 'write' markers, complete."""
    for record in result.records:
        c.replay(record)
    for action in result.after_write:
        action()
    if result.completion is not None:
        if markers is not None:
            markers.append(result.completion)
        run(c, c.complete(result.completion))
    return result.response


def test_init_commit_abort_cycle():
    c = coordinator(Clock())
    assert run(c, c.init_producer_id("t", 30000)) == (ErrorCode.none, 100, 0)
    assert run(c, c.add_partitions("t", 100, 0, [("a", 0), ("b", 1)])) == ErrorCode.none
    assert c.txns["t"].state == TxnState.ONGOING
    markers: list = []
    assert run(c, c.end_txn("t", 100, 0, True), markers) == ErrorCode.none
    assert markers[0].commit and markers[0].partitions == {("a", 0), ("b", 1)}
    assert c.txns["t"].state == TxnState.COMPLETE_COMMIT and not c.txns["t"].partitions
    assert run(c, c.end_txn("t", 100, 0, True)) == ErrorCode.none  # retry
    assert run(c, c.end_txn("t", 100, 0, False)) == ErrorCode.invalid_txn_state


def test_errors():
    c = coordinator(Clock())
    assert run(c, c.init_producer_id("t", 60001))[0] == ErrorCode.invalid_transaction_timeout
    assert run(c, c.init_producer_id("", 1000))[0] == ErrorCode.invalid_request
    run(c, c.init_producer_id("t", 1000))
    assert run(c, c.add_partitions("t", 7, 0, [("a", 0)])) == ErrorCode.invalid_producer_id_mapping
    assert run(c, c.add_partitions("t", 100, 3, [("a", 0)])) == ErrorCode.producer_fenced
    assert run(c, c.end_txn("t", 100, 0, True)) == ErrorCode.invalid_txn_state  # Empty


def test_reinit_fences_and_aborts_ongoing_transaction():
    c = coordinator(Clock())
    run(c, c.init_producer_id("t", 30000))
    run(c, c.add_partitions("t", 100, 0, [("a", 0)]))
    markers: list = []
    first = c.init_producer_id("t", 30000)
    assert first.retry
    run(c, first, markers)
    assert markers[0].commit is False and markers[0].producer_epoch == 1
    assert run(c, c.init_producer_id("t", 30000)) == (ErrorCode.none, 100, 2)
    assert run(c, c.end_txn("t", 100, 0, True)) == ErrorCode.producer_fenced


def test_timeout_aborts_with_bumped_epoch():
    clock = Clock()
    c = coordinator(clock)
    run(c, c.init_producer_id("t", 5000))
    run(c, c.add_partitions("t", 100, 0, [("a", 0)]))
    clock.now += 4999
    assert c.poll_timers() == []
    clock.now += 1
    [result] = c.poll_timers()
    markers: list = []
    run(c, result, markers)
    assert markers[0].producer_epoch == 1 and not markers[0].commit
    assert c.txns["t"].state == TxnState.COMPLETE_ABORT
    # KIP-360: the old producer may re-initialise with its old epoch and gets the bumped one
    assert run(c, c.init_producer_id("t", 5000, 100, 0)) == (ErrorCode.none, 100, 1)


def test_replay_rebuilds_state_and_verify():
    c = coordinator(Clock())
    records = []
    for operation in (lambda: c.init_producer_id("t", 30000), lambda: c.add_partitions("t", 100, 0, [("a", 0)])):
        result = operation()
        records += result.records
        run(c, result)
    fresh = coordinator(Clock())
    for record in records:
        fresh.replay(record)
    assert fresh.txns["t"] == c.txns["t"]
    assert fresh.verify_partitions("t", 100, 0, [("a", 0), ("a", 1)]) == {
        ("a", 0): ErrorCode.none, ("a", 1): ErrorCode.invalid_txn_state}
    _, _, listed = fresh.list_transactions(["Ongoing"], [])
    assert [t["transactional_id"] for t in listed] == ["t"]
    assert fresh.describe("t")["topics"] == [{"topic": "a", "partitions": [0]}]


def test_txn_index_round_trip(tmp_path: Path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.append(AbortedTxn(5, 0, 10, 11))
    index.append(AbortedTxn(6, 3, 20, 21))
    assert (tmp_path / "00000000000000000000.txnindex").stat().st_size == 2 * 34
    reread = TransactionIndex(index.path)
    assert reread.entries == [AbortedTxn(5, 0, 10, 11), AbortedTxn(6, 3, 20, 21)]
    assert reread.collect(11, 30) == ([AbortedTxn(6, 3, 20, 21)], False)
    assert reread.collect(0, 5) == ([AbortedTxn(5, 0, 10, 11)], True)
    reread.truncate_to(20)
    assert TransactionIndex(index.path).entries == [AbortedTxn(5, 0, 10, 11)]


def _append(log: Log, data: bytes) -> None:
    buf = bytearray(data)
    log.append(buf, split_batches(buf), leader_epoch=0)


def _txn(log: Log, producer_id: int, values: list[bytes], seq: int = 0) -> None:
    _append(log, build_batch([(None, v) for v in values], producer_id=producer_id, producer_epoch=0,
                             base_sequence=seq, transactional=True))


def _marker(log: Log, producer_id: int, control: ControlRecordType) -> None:
    _append(log, build_control_batch(control, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0))


def test_lso_aborted_index_and_recovery(tmp_path: Path):
    directory = tmp_path / "t-0"
    log = Log.open(directory, LogConfig())
    _txn(log, 1, [b"a", b"b"])           # 0-1, producer 1
    _txn(log, 2, [b"x"])                 # 2, producer 2
    assert log.first_unstable_offset == 0
    assert log.producer_state.ongoing_txns() == {1: 0, 2: 2}
    _marker(log, 1, ControlRecordType.ABORT)  # 3
    assert log.first_unstable_offset == 2
    assert log.collect_aborted_txns(0, 10) == [AbortedTxn(1, 0, 3, 2)]
    _marker(log, 2, ControlRecordType.COMMIT)  # 4
    assert log.first_unstable_offset is None
    _txn(log, 1, [b"c"], seq=2)          # 5: open across the restart
    log.close()

    reopened = Log.open(directory, LogConfig())  # from the snapshot taken at close
    assert reopened.first_unstable_offset == 5
    assert reopened.collect_aborted_txns(0, 10) == [AbortedTxn(1, 0, 3, 2)]
    reopened.close()

    for path in directory.glob("*.snapshot"):
        path.unlink()
    (directory / "00000000000000000000.txnindex").unlink()
    recovered = Log.open(directory, LogConfig(), clean_shutdown=False)  # rebuilt from the log
    assert recovered.first_unstable_offset == 5
    assert recovered.collect_aborted_txns(0, 10) == [AbortedTxn(1, 0, 3, 2)]
    recovered.truncate_to(3)  # the abort marker goes: so does its entry
    assert recovered.collect_aborted_txns(0, 10) == []
    assert recovered.first_unstable_offset == 0
    recovered.close()


def test_idle_transactional_ids_expire_with_tombstones():
    clock = Clock()
    ids = itertools.count(100)
    c = TransactionCoordinator(TxnConfig(num_partitions=3, max_timeout_ms=60000, id_expiration_ms=10_000,
                                         id_expiration_check_interval_ms=1000), Timer(clock), lambda: next(ids))
    for p in range(3):
        c.begin_loading(p)
        c.finish_loading(p)
    run(c, c.init_producer_id("idle", 30000))  # Empty
    run(c, c.init_producer_id("done", 30000))
    run(c, c.add_partitions("done", 101, 0, [("a", 0)]))
    run(c, c.end_txn("done", 101, 0, False))  # CompleteAbort
    run(c, c.init_producer_id("busy", 30000))
    clock.now += 9_000
    run(c, c.add_partitions("busy", 102, 0, [("a", 0)]))  # Ongoing: never expires while it is
    clock.now += 1_000
    results = c.poll_timers()
    assert all(r.value is None for result in results for r in result.records)
    for result in results:
        run(c, result)
    assert set(c.txns) == {"busy"}
    clock.now += 1_000
    assert [r for result in c.poll_timers() for r in result.records] == []  # Ongoing, timed out not yet
    # An expired id starts over with a new producer id.
    assert run(c, c.init_producer_id("idle", 30000)) == (ErrorCode.none, 103, 0)


def test_failed_expiration_write_keeps_the_ids():
    clock = Clock()
    c = TransactionCoordinator(TxnConfig(num_partitions=1, id_expiration_ms=10, id_expiration_check_interval_ms=10),
                               Timer(clock), lambda: 7)
    c.begin_loading(0)
    c.finish_loading(0)
    run(c, c.init_producer_id("t", 30000))
    clock.now += 20
    [result] = c.poll_timers()  # the runtime's append of these tombstones fails: nothing is replayed
    assert "t" in c.txns
    clock.now += 10
    [again] = c.poll_timers()  # and the next check tries again
    assert again.records == result.records
