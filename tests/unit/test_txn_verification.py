"""Transactional batches verified by a coordinator on another broker (KIP-890 part 1), at the partition:
the batch waits for the answer in its partition's queue, later appends wait behind it, only the batch that
opens the producer's transaction here is verified, and a marker that ends the transaction while the
answer is under way makes the batch fail instead of opening a transaction nobody will end."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from klamm.broker.partition import Partition, log_config
from klamm.broker.txn_verification import TxnVerifier, produce_error
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import ControlRecordType, build_batch
from klamm.storage.log import Log

PID = 7


def make(tmp_path) -> Partition:
    config = TopicConfig.resolve(BrokerConfig.from_properties({}), {})
    return Partition("t", 0, uuid.uuid4(), Log.open(tmp_path / "t-0", log_config(config)), config)


def txn_batch(seq: int, value: bytes = b"v") -> bytes:
    return build_batch([(None, value)], producer_id=PID, producer_epoch=0, base_sequence=seq, transactional=True)


class Coordinator:
    """verify_txn as the produce path passes it: each call a future the test answers."""

    def __init__(self) -> None:
        self.asked: list[asyncio.Future[ErrorCode]] = []

    def __call__(self, header) -> asyncio.Future[ErrorCode]:
        future = asyncio.get_running_loop().create_future()
        self.asked.append(future)
        return future


def test_the_opening_batch_waits_for_the_coordinator_and_later_appends_wait_behind_it(tmp_path):
    p = make(tmp_path)
    coordinator = Coordinator()

    async def run():
        first = p.submit(txn_batch(0), coordinator)
        plain = p.submit(build_batch([(None, b"plain")]))  # another producer's batch keeps its place
        assert isinstance(first, asyncio.Future) and isinstance(plain, asyncio.Future)
        assert p.log_end_offset == 0 and len(coordinator.asked) == 1
        coordinator.asked[0].set_result(ErrorCode.none)
        first, plain = await first, await plain
        second = p.submit(txn_batch(1), coordinator)  # the transaction is open here: not asked again
        return first, plain, second

    first, plain, second = asyncio.run(run())
    assert (first.first_offset, plain.first_offset, second.first_offset) == (0, 1, 2)
    assert len(coordinator.asked) == 1


def test_a_refused_verification_appends_nothing(tmp_path):
    p = make(tmp_path)
    coordinator = Coordinator()

    async def run():
        pending = p.submit(txn_batch(0), coordinator)
        coordinator.asked[0].set_result(ErrorCode.invalid_txn_state)
        with pytest.raises(KafkaError) as refused:
            await pending
        return refused.value.code

    assert asyncio.run(run()) == ErrorCode.invalid_txn_state
    assert p.log_end_offset == 0 and p.last_stable_offset == 0


def test_a_marker_during_verification_fails_the_batch_instead_of_opening_a_hanging_transaction(tmp_path):
    p = make(tmp_path)
    coordinator = Coordinator()

    async def run():
        pending = p.submit(txn_batch(0), coordinator)
        # the coordinator aborted the transaction meanwhile; its marker reaches this leader first
        p.append_marker(PID, 0, 0, ControlRecordType.ABORT)
        coordinator.asked[0].set_result(ErrorCode.none)  # the answer of before the abort
        with pytest.raises(KafkaError) as refused:
            await pending
        return refused.value.code

    assert asyncio.run(run()) == ErrorCode.invalid_txn_state
    assert p.log_end_offset == 1  # the marker only
    assert p.last_stable_offset == p.log_end_offset  # no transaction left open


def test_coordinator_answers_become_produce_errors_as_kafka_maps_them():
    for retriable in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                      ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
                      ErrorCode.network_exception):
        assert produce_error(retriable) == ErrorCode.not_enough_replicas
    assert produce_error(ErrorCode.producer_fenced) == ErrorCode.invalid_producer_epoch
    assert produce_error(ErrorCode.invalid_txn_state) == ErrorCode.invalid_txn_state
    assert produce_error(ErrorCode.none) == ErrorCode.none


def test_requests_for_one_coordinator_are_batched_and_a_newer_epoch_fences_the_waiting_one():
    asked: list[dict] = []
    release = asyncio.Event()

    class Connection:
        host, port = "127.0.0.1", 1

        async def request(self, api_key, version, body):
            asked.append(body)
            await release.wait()

            class Partition:
                def __init__(self, index):
                    self.partition_index, self.partition_error_code = index, ErrorCode.none

            class Response:
                error_code = ErrorCode.none
                results_by_transaction = [
                    type("T", (), {"transactional_id": t["transactional_id"], "topic_results": [
                        type("R", (), {"name": topic["name"],
                                       "results_by_partition": [Partition(i) for i in topic["partitions"]]})()
                        for topic in t["topics"]]})()
                    for t in body["transactions"]]
            return Response()

        def close(self):
            pass

    async def run():
        verifier = TxnVerifier(1, lambda node: ("127.0.0.1", 1), 30_000)
        verifier._connections._connections[2] = Connection()  # type: ignore[assignment]
        first = verifier.verify(2, "a", 1, 0, ("t", 0))  # sent at once
        await asyncio.sleep(0)
        waiting = [verifier.verify(2, "b", 2, 0, ("t", 0)), verifier.verify(2, "b", 2, 0, ("t", 1))]
        old = verifier.verify(2, "c", 3, 0, ("t", 0))
        newer = verifier.verify(2, "c", 3, 1, ("t", 0))  # a newer epoch of c: the waiting one is fenced
        release.set()
        return [await f for f in (first, *waiting, old, newer)]

    results = asyncio.run(run())
    assert results == [ErrorCode.none, ErrorCode.none, ErrorCode.none, ErrorCode.invalid_producer_epoch,
                       ErrorCode.none]
    assert len(asked) == 2  # a, then b and c together
    second = {t["transactional_id"]: t for t in asked[1]["transactions"]}
    assert second["b"]["topics"] == [{"name": "t", "partitions": [0, 1]}] and second["c"]["producer_epoch"] == 1
    assert all(t["verify_only"] for body in asked for t in body["transactions"])


def test_guards_no_append_took_expire_with_the_producer_ids(tmp_path):
    p = make(tmp_path)
    coordinator = Coordinator()

    async def run():
        pending = p.submit(txn_batch(0), coordinator)
        coordinator.asked[0].set_result(ErrorCode.invalid_txn_state)
        with pytest.raises(KafkaError):
            await pending

    asyncio.run(run())
    assert PID in p._verification_guards
    p.expire_verification_guards(p._time_ms() - 60_000)  # younger than that: kept
    assert PID in p._verification_guards
    p.expire_verification_guards(p._time_ms() + 1)
    assert not p._verification_guards


def test_a_batch_that_waited_while_leadership_moved_is_not_appended(tmp_path):
    p = make(tmp_path)
    p.become_leader(1, node_id=1, replicas=[1, 2], isr=[1, 2])
    coordinator = Coordinator()

    async def run():
        pending = p.submit(txn_batch(0), coordinator)
        p.become_follower(2, 2, [1, 2], [1, 2])
        coordinator.asked[0].set_result(ErrorCode.none)
        with pytest.raises(KafkaError) as refused:
            await pending
        return refused.value.code

    assert asyncio.run(run()) == ErrorCode.not_leader_or_follower
    assert p.log_end_offset == 0
