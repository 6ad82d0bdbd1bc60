"""Topic configs the produce path applies: compression.<codec>.level on recompression, and
max.compaction.lag.ms rolling the active segment of a compacted topic."""

from __future__ import annotations

import uuid

import pytest

from klamm.broker.partition import Partition, log_config
from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from klamm.config.topic import TopicConfig
from klamm.protocol.batch import split_batches
from klamm.protocol.records import NewRecord, build_batch, decode_batch
from klamm.storage.log import Log

NOW = 1_800_000_000_000


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def partition(tmp_path, overrides: dict[str, str], broker: dict[str, str] | None = None,
              clock: Clock | None = None) -> Partition:
    clock = clock or Clock(NOW)
    config = TopicConfig.resolve(BrokerConfig.from_properties(broker or {}), overrides)
    log = Log.open(tmp_path / "t-0", log_config(config), time_ms=clock)
    return Partition("t", 0, uuid.uuid4(), log, config, time_ms=clock)


def compressible() -> bytes:
    # text-like values: every codec finds more at a higher level
    records = [NewRecord(f"key-{i}".encode(), (f"value {i} of the day " * (1 + i % 7)).encode() + bytes([i % 251]) * 3)
               for i in range(2000)]
    return build_batch(records, timestamp_ms=NOW)


def stored_size(tmp_path, name: str, overrides: dict[str, str], broker: dict[str, str] | None = None) -> int:
    p = partition(tmp_path / name, overrides, broker)
    p.append(compressible())
    data = p.log.read_bytes(0, 1 << 24)
    [header] = split_batches(data)
    assert [r.key for r in decode_batch(data, check_crc=True)[1]][:2] == [b"key-0", b"key-1"]
    return header.size


@pytest.mark.parametrize("codec, low, high", [("gzip", "1", "9"), ("zstd", "1", "19"), ("lz4", "9", "17")])
def test_recompression_uses_the_topic_level(tmp_path, codec, low, high):
    key = f"compression.{codec}.level"
    fast = stored_size(tmp_path, "fast", {"compression.type": codec, key: low})
    best = stored_size(tmp_path, "best", {"compression.type": codec, key: high})
    assert best < fast
    # the broker setting is the topic default
    assert stored_size(tmp_path, "broker", {"compression.type": codec}, {key: high}) == best


@pytest.mark.parametrize("key, bad", [("compression.gzip.level", "10"), ("compression.gzip.level", "0"),
                                      ("compression.lz4.level", "18"), ("compression.zstd.level", "23")])
def test_levels_are_validated(key, bad):
    with pytest.raises(ConfigError):
        TopicConfig.resolve(BrokerConfig.from_properties({}), {key: bad})


def test_max_compaction_lag_rolls_the_active_segment_by_record_time(tmp_path):
    p = partition(tmp_path, {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"})
    p.append(build_batch([(b"a", b"1")], timestamp_ms=NOW))
    p.append(build_batch([(b"a", b"2")], timestamp_ms=NOW + 1000))
    assert len(p.log.segments) == 1
    p.append(build_batch([(b"a", b"3")], timestamp_ms=NOW + 1001))
    assert [s.base_offset for s in p.log.segments] == [0, 2]


def test_max_compaction_lag_rolls_by_wall_clock_without_timestamps(tmp_path):
    from test_produce_validation import librdkafka_batch

    clock = Clock(NOW)
    p = partition(tmp_path, {"cleanup.policy": "compact", "max.compaction.lag.ms": "60000"}, clock=clock)
    p.append(librdkafka_batch([-1]))
    clock.now += 60_001
    p.append(librdkafka_batch([-1]))
    assert [s.base_offset for s in p.log.segments] == [0, 1]


def test_max_compaction_lag_does_not_roll_a_delete_topic(tmp_path):
    p = partition(tmp_path, {"max.compaction.lag.ms": "1000"})
    p.append(build_batch([(b"a", b"1")], timestamp_ms=NOW))
    p.append(build_batch([(b"a", b"2")], timestamp_ms=NOW + 5000))
    assert len(p.log.segments) == 1


def test_a_config_change_applies_to_the_next_append(tmp_path):
    p = partition(tmp_path, {"compression.type": "gzip", "compression.gzip.level": "1"})
    p.append(compressible())
    p.config = TopicConfig.resolve(BrokerConfig.from_properties({}),
                                   {"compression.type": "gzip", "compression.gzip.level": "9"})
    p.append(compressible())
    first, second = split_batches(p.log.read_bytes(0, 1 << 24))
    assert second.size < first.size
