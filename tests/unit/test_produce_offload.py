"""Costly produce work (record checks of compacted topics, recompression) runs in a worker thread for
big batches, and a partition's appends still happen in submit order (Partition.submit)."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

import klamm.broker.partition as partition_module
from klamm.broker.partition import OFFLOAD_MIN_BYTES, Partition, log_config
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import build_batch, iter_records
from klamm.storage.log import Log


@pytest.fixture
def threads(monkeypatch) -> list[str]:
    """Names of the threads prepare_batches ran on, in call order."""
    seen: list[str] = []
    real = partition_module.prepare_batches

    def spy(*args):
        seen.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(partition_module, "prepare_batches", spy)
    return seen


def make(tmp_path, overrides: dict[str, str]) -> Partition:
    config = TopicConfig.resolve(BrokerConfig.from_properties({}), overrides)
    return Partition("t", 0, uuid.uuid4(), Log.open(tmp_path / "t-0", log_config(config)), config)


def big(tag: str, *, keyless: bool = False) -> bytes:
    n = OFFLOAD_MIN_BYTES // 100 + 1
    data = build_batch([(None if keyless else f"{tag}-{i}".encode(), b"v" * 100) for i in range(n)])
    assert len(data) >= OFFLOAD_MIN_BYTES
    return data


def small(tag: str) -> bytes:
    return build_batch([(tag.encode(), b"s")])


def keys(p: Partition) -> list[bytes]:
    return [r.key for r in iter_records(p.log.read_bytes(0, 1 << 26))]


async def resolve(result):
    return await result if isinstance(result, asyncio.Future) else result


def test_big_compacted_batch_is_checked_off_the_loop_and_later_appends_wait_for_it(tmp_path, threads):
    p = make(tmp_path, {"cleanup.policy": "compact"})

    async def run():
        first = p.submit(big("a"))
        second = p.submit(small("b"))  # cheap, but must not overtake
        assert isinstance(first, asyncio.Future) and isinstance(second, asyncio.Future)
        assert p.log_end_offset == 0
        return await first, await second

    first, second = asyncio.run(run())
    assert first.first_offset == 0 and second.first_offset == first.last_offset + 1
    assert threads[0] != threading.main_thread().name and threads[1] == threading.main_thread().name
    assert keys(p)[-1] == b"b" and keys(p)[0] == b"a-0"


def test_many_submitters_keep_submit_order(tmp_path):
    p = make(tmp_path, {"cleanup.policy": "compact"})
    order = [f"{c}{i}" for i in range(6) for c in "xyz"]

    async def connection(tags: list[str]):
        results = []
        for tag in tags:
            results.append(p.submit(big(tag) if tag.startswith("x") else small(tag)))
            await asyncio.sleep(0)  # let the other connections submit in between
        return [await resolve(r) for r in results]

    async def run():
        return await asyncio.gather(*(connection([t for t in order if t[0] == c]) for c in "xyz"))

    results = {tag: r for c, per_connection in zip("xyz", asyncio.run(run()))
               for tag, r in zip([t for t in order if t[0] == c], per_connection)}
    assert [results[tag].first_offset for tag in order] == sorted(r.first_offset for r in results.values())
    # the log holds the batches in the order they were submitted (interleaved round-robin)
    appended = [k.decode().split("-")[0] for k in keys(p)]
    compressed = [t for i, t in enumerate(appended) if i == 0 or appended[i - 1] != t]
    assert compressed == order


def test_a_refused_offloaded_batch_does_not_block_the_queue(tmp_path):
    p = make(tmp_path, {"cleanup.policy": "compact"})

    async def run():
        bad = p.submit(big("a", keyless=True))
        good = p.submit(small("b"))
        with pytest.raises(KafkaError) as error:
            await bad
        assert error.value.code == ErrorCode.invalid_record
        return await good

    assert asyncio.run(run()).first_offset == 0
    assert keys(p) == [b"b"]


def test_recompression_of_big_batches_is_offloaded(tmp_path, threads):
    p = make(tmp_path, {"compression.type": "zstd"})

    async def run():
        result = p.submit(big("a"))
        assert isinstance(result, asyncio.Future)
        return await result

    assert asyncio.run(run()).last_offset == OFFLOAD_MIN_BYTES // 100
    assert threads[0] != threading.main_thread().name


def test_small_or_cheap_batches_append_inline(tmp_path, threads):
    compacted = make(tmp_path / "c", {"cleanup.policy": "compact"})
    plain = make(tmp_path / "p", {})

    async def run():
        assert not isinstance(compacted.submit(small("a")), asyncio.Future)  # below the threshold
        assert not isinstance(plain.submit(big("a")), asyncio.Future)  # nothing to decode or recompress

    asyncio.run(run())
    assert threads == [threading.main_thread().name] * 2


def test_a_request_given_up_while_queued_still_appends_and_does_not_block(tmp_path):
    """A connection that closes cancels its handler: the batch was accepted, so it is appended
    (as an inline append would have been) and the appends behind it go on."""
    p = make(tmp_path, {"cleanup.policy": "compact"})

    async def run():
        first = p.submit(big("a"))
        waiter = asyncio.ensure_future(first)
        await asyncio.sleep(0)
        waiter.cancel()  # the handler awaiting it goes away
        second = p.submit(small("b"))
        return await second

    assert asyncio.run(run()).first_offset == OFFLOAD_MIN_BYTES // 100 + 1
    assert keys(p)[0] == b"a-0" and keys(p)[-1] == b"b"
