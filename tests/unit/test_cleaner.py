"""Log cleaner: exact survivors after compaction, tombstones, lags, codecs, grouping, reads in gaps,
choosing the dirtiest log, checkpoints, and the null-key check of compacted topics."""

from __future__ import annotations

import pytest

from klamm.protocol.batch import read_batch_header, split_batches
from klamm.protocol.compression import Compression
from klamm.protocol.records import NewRecord, build_batch, build_control_batch, decode_batch
from klamm.storage.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    DELETE_HORIZON_FLAG,
    Cleaner,
    CleanerCheckpoints,
    CompactionConfig,
    commit_clean,
    commit_clean_steps,
    grab_filthiest,
    log_to_clean,
    prepare_clean,
)
from klamm.storage.log import Log, LogConfig

NOW = 10_000_000
EAGER = CompactionConfig(min_cleanable_ratio=0.0, delete_retention_ms=1000)


def open_log(tmp_path, config: LogConfig | None = None) -> Log:
    return Log.open(tmp_path / "topic-0", config or LogConfig(), time_ms=lambda: NOW)


def append(log: Log, records, *, codec: int = 0, ts: int = NOW - 1000, producer_id: int = -1) -> None:
    recs = [NewRecord(k, v) if not isinstance(k, NewRecord) else k for k, v in records]
    buf = bytearray(build_batch(recs, compression=codec, timestamp_ms=ts, producer_id=producer_id,
                                producer_epoch=0 if producer_id >= 0 else -1,
                                base_sequence=0 if producer_id >= 0 else -1))
    log.append(buf, split_batches(buf), leader_epoch=0)


_SHARED: list[Cleaner] = []


def shared_cleaner() -> Cleaner:
    """One cleaner for the tests' cleanings: each Cleaner starts a process (a fresh interpreter) on its
    first cleaning. It ends with the test run (its process reads EOF once this one exits)."""
    if not _SHARED:
        _SHARED.append(Cleaner(1 << 20))
    return _SHARED[0]


def clean(log: Log, config: CompactionConfig = EAGER, *, checkpoint: int | None = None, now: int = NOW,
          cleaner: Cleaner | None = None) -> int:
    """One synchronous cleaning pass; returns the new checkpoint."""
    ltc = log_to_clean(log, config, checkpoint, now, log.log_end_offset)
    result = (cleaner or shared_cleaner()).clean(prepare_clean(ltc, now))
    complete, replaced = commit_clean(log, result)
    assert complete
    for segment in replaced:
        segment.delete()
    return result.end_offset


def batches(log: Log) -> list[bytes]:
    """Every batch from the log start, read through Log.read as a fetch would."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 20)
        if not data:
            break
        for header in split_batches(data):
            out.append(data[header.position:header.position + header.size])
            offset = header.next_offset
    return out


def dump(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for data in batches(log) for r in decode_batch(data, check_crc=True)[1]]


def k(n: int) -> bytes:
    return f"k{n}".encode()


def test_keeps_the_latest_record_per_key_with_offsets(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"a0"), (k(2), b"b0"), (k(3), b"c0")])  # 0-2
    append(log, [(k(1), b"a1"), (k(2), b"b1")])  # 3-4
    log.roll()
    append(log, [(k(1), b"a2"), (k(4), b"d0")])  # 5-6
    log.roll()
    append(log, [(k(1), b"active"), (k(4), b"active")])  # 7-8, active segment
    end = clean(log)
    assert end == 7
    assert dump(log) == [
        (2, k(3), b"c0"), (4, k(2), b"b1"), (5, k(1), b"a2"), (6, k(4), b"d0"),
        (7, k(1), b"active"), (8, k(4), b"active"),
    ]
    assert log.log_start_offset == 0 and log.log_end_offset == 9
    # Batches keep their base and last offsets; records keep theirs (gaps inside).
    headers = [read_batch_header(b) for b in batches(log)]
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [
        (0, 2, 1), (3, 4, 1), (5, 6, 2), (7, 8, 2),
    ]


def test_active_segment_is_never_cleaned(tmp_path):
    log = open_log(tmp_path)
    for n in range(5):
        append(log, [(k(1), f"v{n}".encode())])
    before = dump(log)
    ltc = log_to_clean(log, EAGER, None, NOW, log.log_end_offset)
    assert ltc.cleanable_bytes == 0 and grab_filthiest([ltc]) is None
    assert clean(log) == 0
    assert dump(log) == before


def test_second_cleaning_dedupes_clean_section_against_new_dirty_records(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"a0"), (k(2), b"b0")])
    log.roll()
    append(log, [(k(3), b"c0")])
    end = clean(log)
    assert end == 2
    append(log, [(k(1), b"a1")])  # offset 3
    log.roll()
    append(log, [(k(9), b"z")])
    ltc = log_to_clean(log, EAGER, end, NOW, log.log_end_offset)
    assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset) == (2, 4)
    assert clean(log, checkpoint=end) == 4
    assert dump(log) == [(1, k(2), b"b0"), (2, k(3), b"c0"), (3, k(1), b"a1"), (4, k(9), b"z")]


def test_tombstone_survives_first_cleaning_with_a_delete_horizon_then_goes(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"a0"), (k(2), b"b0")])
    append(log, [(k(1), None)])  # tombstone at 2
    log.roll()
    append(log, [(k(3), b"c")])
    end = clean(log, now=NOW)
    assert dump(log) == [(1, k(2), b"b0"), (2, k(1), None), (3, k(3), b"c")]
    tomb = read_batch_header(batches(log)[1])
    assert tomb.attributes & DELETE_HORIZON_FLAG
    assert tomb.base_timestamp == NOW + EAGER.delete_retention_ms
    # The record keeps its own timestamp although the base timestamp now holds the horizon.
    assert decode_batch(batches(log)[1])[1][0].timestamp == NOW - 1000
    # Kafka removes an expired tombstone only when new dirty data makes the log due again.
    append(log, [(k(9), b"x")])  # 4
    log.roll()
    end = clean(log, checkpoint=end, now=NOW + 999)
    assert dump(log) == [(1, k(2), b"b0"), (2, k(1), None), (3, k(3), b"c"), (4, k(9), b"x")]
    append(log, [(k(9), b"y")])  # 5
    log.roll()
    assert clean(log, checkpoint=end, now=NOW + 1000) == 6
    assert dump(log) == [(1, k(2), b"b0"), (3, k(3), b"c"), (5, k(9), b"y")]


def test_tombstone_is_dropped_only_after_it_was_cleaned_once(tmp_path):
    """Even with delete.retention.ms=0 a fresh tombstone survives one cleaning (its horizon starts then)."""
    log = open_log(tmp_path)
    append(log, [(k(1), b"a"), (k(1), None), (k(2), b"b")])
    log.roll()
    append(log, [(k(2), b"b2")])
    config = CompactionConfig(min_cleanable_ratio=0.0, delete_retention_ms=0)
    end = clean(log, config)
    assert dump(log) == [(1, k(1), None), (2, k(2), b"b"), (3, k(2), b"b2")]
    log.roll()
    append(log, [(k(3), b"c")])
    clean(log, config, checkpoint=end, now=NOW)
    assert dump(log) == [(3, k(2), b"b2"), (4, k(3), b"c")]


def test_min_compaction_lag_leaves_young_segments_dirty(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"old")], ts=NOW - 100_000)
    log.roll()
    append(log, [(k(1), b"young")], ts=NOW - 10)
    log.roll()
    append(log, [(k(1), b"active")], ts=NOW)
    config = CompactionConfig(min_cleanable_ratio=0.0, min_compaction_lag_ms=1000)
    ltc = log_to_clean(log, config, None, NOW, log.log_end_offset)
    assert ltc.first_uncleanable_offset == 1
    assert clean(log, config) == 1
    # Nothing after offset 1 was mapped, so "old" has no known successor and stays.
    assert dump(log) == [(0, k(1), b"old"), (1, k(1), b"young"), (2, k(1), b"active")]
    # Once the young segment is old enough it is cleaned, and supersedes offset 0.
    assert clean(log, config, checkpoint=1, now=NOW + 1000) == 2
    assert dump(log) == [(1, k(1), b"young"), (2, k(1), b"active")]


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_keep_their_codec(tmp_path, codec):
    log = open_log(tmp_path)
    append(log, [(k(n), b"x" * 50) for n in range(10)], codec=codec)  # 0-9
    append(log, [(k(n), b"y" * 50) for n in range(10, 15)], codec=codec)  # 10-14, all survive
    append(log, [(k(n), b"z") for n in range(0, 10, 2)], codec=codec)  # 15-19
    log.roll()
    append(log, [(k(99), b"-")])
    untouched = batches(log)[1]
    clean(log)
    got = batches(log)
    headers = [read_batch_header(b) for b in got]
    assert [h.compression for h in headers[:3]] == [codec] * 3
    assert got[1] == untouched  # a batch whose records all survive is copied byte for byte
    assert [(o, key) for o, key, _ in dump(log)] == (
        [(n, k(n)) for n in range(1, 10, 2)] + [(n, k(n)) for n in range(10, 15)]
        + [(15 + i, k(n)) for i, n in enumerate(range(0, 10, 2))] + [(20, k(99))]
    )


def test_control_batches_are_kept(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"a")])
    marker = bytearray(build_control_batch(1, producer_id=7, producer_epoch=0, coordinator_epoch=0, base_offset=1))
    log.append_as_follower(marker, split_batches(marker))
    append(log, [(k(1), b"b")])
    log.roll()
    append(log, [(k(2), b"c")])
    clean(log)
    kept = [read_batch_header(b) for b in batches(log)]
    assert [(h.base_offset, h.is_control) for h in kept] == [(1, True), (2, False), (3, False)]


def test_empty_batch_kept_for_an_active_producer(tmp_path):
    """An idempotent producer's last batch stays (empty) so its sequence survives a restart."""
    log = open_log(tmp_path)
    append(log, [(k(1), b"a")], producer_id=5)  # 0: the producer's only (hence last) batch
    append(log, [(k(1), b"b")])  # 1
    log.roll()
    append(log, [(k(2), b"c")])
    clean(log)
    headers = [read_batch_header(b) for b in batches(log)]
    assert [(h.base_offset, h.records_count, h.producer_id) for h in headers] == [(0, 0, 5), (1, 1, -1), (2, 1, -1)]


def test_fetch_at_an_offset_in_a_gap_returns_the_next_batch(tmp_path):
    log = open_log(tmp_path, LogConfig(index_interval_bytes=1))
    for n in range(6):
        append(log, [(k(n % 2), f"v{n}".encode())])  # 0..5
        log.roll()
    append(log, [(k(7), b"x")])
    clean(log)
    assert [o for o, _, _ in dump(log)] == [4, 5, 6]
    for offset in range(0, 4):
        result = log.read(offset, 1 << 20, max_offset=log.log_end_offset, min_one=True)
        assert result.length and result.first_offset == 4
    assert read_batch_header(log.read_bytes(5, 100)).base_offset == 5


def test_small_segments_are_grouped_up_to_segment_bytes(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=10_000))
    for n in range(20):
        append(log, [(k(n % 4), b"v" * 100)])
        log.roll()
    append(log, [(k(100), b"x")])
    assert len(log.segments) == 21
    clean(log)
    assert len(log.segments) == 2  # 20 cleaned segments fit in one, plus the active segment
    assert [o for o, _, _ in dump(log)] == [16, 17, 18, 19, 20]
    # Grouping stops at segment.bytes.
    log2 = open_log(tmp_path / "b", LogConfig(segment_bytes=400))
    for n in range(10):
        append(log2, [(k(n), b"v" * 100)])  # every record survives: ~180 bytes per segment
        log2.roll()
    append(log2, [(k(100), b"x")])
    clean(log2)
    assert [s.base_offset for s in log2.segments] == [0, 2, 4, 6, 8, 10]
    assert [o for o, _, _ in dump(log2)] == list(range(11))


def test_a_full_offset_map_cleans_part_of_the_dirty_section(tmp_path):
    log = open_log(tmp_path)
    for n in range(10):
        append(log, [(k(n), b"a")])
    log.roll()
    for n in range(10):
        append(log, [(k(n), b"b")])  # 10..19
    log.roll()
    append(log, [(k(100), b"x")])
    small = Cleaner(24 * 5, load_factor=1.0)  # room for 5 keys
    # Each pass maps 5 keys and cleans only up to the last offset mapped.
    assert clean(log, cleaner=small) == 5
    assert clean(log, checkpoint=5, cleaner=small) == 10
    assert [o for o, _, _ in dump(log)] == list(range(21))  # nothing superseded yet
    assert clean(log, checkpoint=10, cleaner=small) == 15
    assert [o for o, _, _ in dump(log)] == list(range(5, 21))
    assert clean(log, checkpoint=15, cleaner=small) == 20
    assert [o for o, _, _ in dump(log)] == list(range(10, 21))


def test_keyless_records_are_removed_as_kafka_does(tmp_path):
    log = open_log(tmp_path)
    append(log, [(None, b"x"), (k(1), b"a")])
    log.roll()
    append(log, [(k(2), b"b")])
    clean(log)
    assert dump(log) == [(1, k(1), b"a"), (2, k(2), b"b")]


def test_cleaned_log_survives_a_restart(tmp_path):
    log = open_log(tmp_path)
    for n in range(30):
        append(log, [(k(n % 3), f"v{n}".encode())])
        if n % 7 == 6:
            log.roll()
    clean(log)
    want = dump(log)
    log.close()
    for clean_shutdown in (True, False):
        reopened = Log.open(tmp_path / "topic-0", LogConfig(), clean_shutdown=clean_shutdown, time_ms=lambda: NOW)
        assert dump(reopened) == want and reopened.log_end_offset == 30
        reopened.close()
    assert not [p for p in (tmp_path / "topic-0").iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]


# -- choosing the log ---------------------------------------------------------------------------


def test_dirty_ratio_decides_and_the_dirtiest_log_wins(tmp_path):
    logs = []
    for name, dirty_segments in (("a", 1), ("b", 3)):
        log = Log.open(tmp_path / f"{name}-0", LogConfig(), time_ms=lambda: NOW)
        append(log, [(k(1), b"x" * 100)])
        log.roll()
        end = clean(log)
        for _ in range(dirty_segments):
            append(log, [(k(1), b"x" * 100)])
            log.roll()
        logs.append((log, end))
    half = CompactionConfig(min_cleanable_ratio=0.5)
    candidates = [log_to_clean(log, half, end, NOW, log.log_end_offset) for log, end in logs]
    assert [round(c.cleanable_ratio, 2) for c in candidates] == [0.5, 0.75]
    assert grab_filthiest(candidates).log is logs[1][0]
    assert grab_filthiest(candidates[:1]) is None  # Kafka: strictly above the ratio
    strict = CompactionConfig(min_cleanable_ratio=0.9)
    assert grab_filthiest([log_to_clean(log, strict, end, NOW, log.log_end_offset) for log, end in logs]) is None


def test_max_compaction_lag_forces_cleaning(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"x" * 100)], ts=NOW - 10_000)
    log.roll()
    append(log, [(k(1), b"y")], ts=NOW - 10_000)
    log.roll()
    append(log, [(k(1), b"z")])
    end = clean(log)
    append(log, [(k(2), b"w")], ts=NOW)
    log.roll()
    lazy = CompactionConfig(min_cleanable_ratio=0.99, max_compaction_lag_ms=60_000)
    assert grab_filthiest([log_to_clean(log, lazy, end, NOW, log.log_end_offset)]) is None
    overdue = CompactionConfig(min_cleanable_ratio=0.99, max_compaction_lag_ms=1)
    assert grab_filthiest([log_to_clean(log, overdue, end, NOW + 5, log.log_end_offset)]) is not None


def test_checkpoint_outside_the_log_is_reset(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"a")])
    log.roll()
    ltc = log_to_clean(log, EAGER, 99, NOW, log.log_end_offset)
    assert ltc.first_dirty_offset == 0 and ltc.reset_checkpoint
    ltc = log_to_clean(log, EAGER, 1, NOW, log.log_end_offset)
    assert ltc.first_dirty_offset == 1 and not ltc.reset_checkpoint


def test_cleaner_offset_checkpoint_file(tmp_path):
    log_dir = tmp_path
    log = Log.open(log_dir / "t-3", LogConfig(), time_ms=lambda: NOW)
    checkpoints = CleanerCheckpoints([log_dir])
    assert checkpoints.get(log) is None
    checkpoints.record(log, 42, live={("t", 3)})()
    assert (log_dir / CLEANER_OFFSET_CHECKPOINT).read_text() == "0\n1\nt 3 42\n"
    assert CleanerCheckpoints([log_dir]).get(log) == 42
    (log_dir / CLEANER_OFFSET_CHECKPOINT).write_text("garbage")
    assert CleanerCheckpoints([log_dir]).get(log) is None


def test_counters_for_metrics(tmp_path):
    log = open_log(tmp_path)
    append(log, [(k(1), b"a"), (k(1), b"b")])
    log.roll()
    append(log, [(k(1), b"c")])
    cleaner = Cleaner(1 << 20)
    clean(log, cleaner=cleaner)
    assert cleaner.runs == 1 and cleaner.records_read == 2 and cleaner.records_retained == 1
    assert cleaner.bytes_read > cleaner.bytes_written > 0 and cleaner.bytes_cleaned == cleaner.bytes_read


# -- produce-time check of compacted topics ----------------------------------------------------------


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_compacted_topic_refuses_keyless_records(tmp_path, codec):
    import uuid

    from klamm.broker.partition import Partition
    from klamm.config.broker import BrokerConfig
    from klamm.config.topic import TopicConfig
    from klamm.protocol.errors import ErrorCode, KafkaError

    broker = BrokerConfig.from_properties({})
    compacted = Partition("c", 0, uuid.uuid4(), open_log(tmp_path / "c"),
                          TopicConfig.resolve(broker, {"cleanup.policy": "compact,delete"}))
    plain = Partition("p", 0, uuid.uuid4(), open_log(tmp_path / "p"), TopicConfig.resolve(broker, {}))
    keyless = build_batch([(k(1), b"a"), (None, b"b")], compression=codec)
    with pytest.raises(KafkaError) as error:
        compacted.append(keyless)
    assert error.value.code == ErrorCode.invalid_record
    assert "Compacted topic cannot accept message without key" in str(error.value)
    assert compacted.log_end_offset == 0
    assert compacted.append(build_batch([(k(1), b"a"), (k(2), None)], compression=codec)).last_offset == 1
    assert plain.append(keyless).last_offset == 1


def test_appends_and_reads_while_a_worker_cleans(tmp_path):
    """The worker touches only its plan; the owner keeps appending, rolling and reading meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    log = open_log(tmp_path, LogConfig(segment_bytes=2000))
    for n in range(200):
        append(log, [(k(n % 10), f"v{n}".encode())])
    ltc = log_to_clean(log, EAGER, None, NOW, log.log_end_offset)
    plan = prepare_clean(ltc, NOW)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(shared_cleaner().clean, plan)
        n = 200
        while not future.done() or n < 260:
            append(log, [(k(n % 10), f"v{n}".encode())])
            assert dump(log)[-1] == (n, k(n % 10), f"v{n}".encode())
            n += 1
        result = future.result()
    complete, replaced = commit_clean(log, result)
    assert complete and replaced
    for segment in replaced:
        segment.delete()
    got = dump(log)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] == n - 1
    assert {key: value for _, key, value in got} == {k(i % 10): f"v{i}".encode() for i in range(n - 10, n)}
    assert all(o >= ltc.first_uncleanable_offset - 10 for o in offsets)


def test_service_cleans_compacted_partitions_only_and_checkpoints(tmp_path):
    import asyncio
    import uuid
    from types import SimpleNamespace

    from klamm.broker.cleaner_tasks import LogCleanerService
    from klamm.broker.log_tasks import DelayedDeletes
    from klamm.broker.partition import Partition
    from klamm.config.broker import BrokerConfig
    from klamm.config.topic import TopicConfig
    from klamm.storage.log_manager import LogManager

    config = BrokerConfig.from_properties({"log.cleaner.backoff.ms": "10", "log.dirs": str(tmp_path)})
    logs = LogManager([tmp_path], LogConfig(), time_ms=lambda: NOW)
    logs.startup()
    partitions = {}
    for topic, overrides in (("compacted", {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                            "file.delete.delay.ms": "0"}),
                             ("plain", {}), ("__cluster_metadata", {"cleanup.policy": "compact"})):
        log = logs.create_log(topic, 0)
        for n in range(6):
            append(log, [(k(n % 2), f"v{n}".encode())])
            log.roll()
        partitions[(topic, 0)] = Partition(topic, 0, uuid.uuid4(), log, TopicConfig.resolve(config, overrides))
    broker = SimpleNamespace(config=config, log_dirs=[tmp_path], logs=logs,
                             replicas=SimpleNamespace(partitions=partitions))

    async def run() -> LogCleanerService:
        broker.delayed_deletes = DelayedDeletes()
        service = LogCleanerService(broker)
        service.start()
        checkpoint = tmp_path / CLEANER_OFFSET_CHECKPOINT
        for _ in range(500):  # a run counts once cleaned; its commit and checkpoint follow in another thread
            if service.runs and checkpoint.exists() and "compacted" in checkpoint.read_text():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        await service.stop()
        await broker.delayed_deletes.stop()
        return service

    service = asyncio.run(run())
    assert service.runs == 1 and service.bytes_cleaned > 0
    assert [o for o, _, _ in dump(logs.get_log("compacted", 0))] == [4, 5]
    assert [o for o, _, _ in dump(logs.get_log("plain", 0))] == list(range(6))
    assert [o for o, _, _ in dump(logs.get_log("__cluster_metadata", 0))] == list(range(6))
    assert (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text() == "0\n1\ncompacted 0 6\n"
    assert not [p for p in (tmp_path / "compacted-0").iterdir() if ".deleted" in p.name]
    logs.shutdown()


def _cleaned_in_groups(tmp_path):
    """A log whose cleaning comes back in several groups (segment.bytes of 2,000), and that cleaning."""
    log = open_log(tmp_path, LogConfig(segment_bytes=2000))
    for n in range(300):
        append(log, [(k(n % 100), b"v" * 40)])
    ltc = log_to_clean(log, EAGER, None, NOW, log.log_end_offset)
    result = shared_cleaner().clean(prepare_clean(ltc, NOW))
    assert len(result.groups) >= 3
    return log, result


def test_a_cleaning_is_swapped_in_a_group_a_step_the_log_whole_between_two(tmp_path):
    log, result = _cleaned_in_groups(tmp_path)
    before, groups = dump(log), len(result.groups)
    steps = commit_clean_steps(log, result)
    for taken in range(1, groups):
        next(steps)  # one group swapped in, the others waiting in the result
        assert len(result.groups) == groups - taken
        assert {key: value for _, key, value in dump(log)} == {key: value for _, key, value in before}
    with pytest.raises(StopIteration) as done:
        next(steps)
    complete, replaced = done.value.value
    assert complete and replaced and not result.groups
    assert not list(log.directory.glob("*.cleaned"))


def test_a_log_deleted_between_two_steps_gets_no_more_groups_and_their_files_go(tmp_path):
    log, result = _cleaned_in_groups(tmp_path)
    wanted = [True]
    steps = commit_clean_steps(log, result, lambda: wanted[0])
    next(steps)
    left = [group.new.log_path for group in result.groups]
    wanted[0] = False  # the log was deleted meanwhile
    with pytest.raises(StopIteration) as done:
        next(steps)
    complete, replaced = done.value.value
    assert not complete and replaced  # the first group's, swapped in before
    assert not result.groups and not any(path.exists() for path in left)
