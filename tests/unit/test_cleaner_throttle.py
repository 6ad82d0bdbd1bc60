"""log.cleaner.io.max.bytes.per.second: Kafka's Throttler bounds the cleaner's I/O rate (injected clock and sleep)."""

from __future__ import annotations

import time

import pytest
from test_cleaner import EAGER, NOW, append, k

from klamm.broker.cleaner_tasks import LogCleanerService
from klamm.storage.cleaner import PROCESS_CONTEXT, Cleaner, log_to_clean, prepare_clean
from klamm.storage.log import Log, LogConfig
from klamm.storage.throttler import Throttler


class FakeTime:
    """A monotonic clock advanced by sleeping, explicit work, and `tick_ms` per reading."""

    def __init__(self, tick_ms: float = 0) -> None:
        self.ns = 0
        self.slept = 0.0
        self.tick_ns = int(tick_ms * 1e6)

    def clock(self) -> int:
        self.ns += self.tick_ns
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.ns += int(seconds * 1e9)

    def work(self, ms: float) -> None:
        self.ns += int(ms * 1e6)


def test_rate_above_the_limit_sleeps_the_difference():
    t = FakeTime()
    throttler = Throttler(1000.0, check_interval_ms=300, clock_ns=t.clock, sleep=t.sleep)
    total = 0
    for _ in range(200):  # 500 bytes per 10 ms: 50 kB/s natural rate
        t.work(10)
        throttler.maybe_throttle(500)
        total += 500
    elapsed_s = t.ns / 1e9
    # bounded by the rate, up to the bytes of the last, unfinished check interval (31 calls)
    assert (total - 31 * 500) / elapsed_s <= 1000
    assert total / elapsed_s >= 900


def test_rate_below_the_limit_never_sleeps():
    t = FakeTime()
    throttler = Throttler(1_000_000.0, clock_ns=t.clock, sleep=t.sleep)
    for _ in range(100):
        t.work(10)
        throttler.maybe_throttle(1000)  # 100 kB/s
    assert t.slept == 0 and throttler.slept_ms == 0


def test_default_is_unlimited():
    t = FakeTime()
    throttler = Throttler(1.7976931348623157e308, clock_ns=t.clock, sleep=t.sleep)
    for _ in range(10):
        t.work(400)
        throttler.maybe_throttle(1 << 30)
    assert t.slept == 0


def compactable_log(tmp_path, name: str = "topic-0"):
    log = Log.open(tmp_path / name, LogConfig(), time_ms=lambda: NOW)
    for n in range(1000):
        append(log, [(k(n % 20), b"v" * 500)])
        if n % 250 == 249:
            log.roll()
    return log


def timed_clean(cleaner: Cleaner, log) -> tuple[float, int]:
    """Seconds the cleaning took, and its I/O bytes as the throttler counts them (mapped, copied, written)."""
    plan = prepare_clean(log_to_clean(log, EAGER, None, NOW, log.log_end_offset), NOW)
    started = time.monotonic()
    result = cleaner.clean(plan)
    elapsed = time.monotonic() - started
    result.discard()
    return elapsed, 2 * cleaner.bytes_read + cleaner.bytes_written


@pytest.fixture
def cleaners():
    made: list[Cleaner] = []
    yield made
    for cleaner in made:
        cleaner.close()


def test_the_cleaner_process_is_held_to_the_configured_rate(tmp_path, cleaners):
    """In the cleaner process, with the real clock: unthrottled such a cleaning takes a fraction of a second."""
    rate = 400_000.0
    log = compactable_log(tmp_path)
    cleaners.append(Cleaner(1 << 20, throttler=Throttler(rate, check_interval_ms=1, context=PROCESS_CONTEXT)))
    elapsed, io_bytes = timed_clean(cleaners[0], log)
    assert io_bytes > 1_000_000
    # only the last, unfinished check interval (1 ms at the natural rate, tens of MB/s) may go unthrottled
    assert elapsed >= (io_bytes - 200_000) / rate


def test_cleaner_processes_share_one_budget(tmp_path, cleaners):
    """Two cleaner processes cleaning at once stay within the one rate together (their start-up
    counts in the time: that only makes the bound easier, it cannot make it pass unthrottled)."""
    from concurrent.futures import ThreadPoolExecutor

    rate = 800_000.0
    throttler = Throttler(rate, check_interval_ms=1, context=PROCESS_CONTEXT)
    logs = [compactable_log(tmp_path, f"topic-{n}") for n in range(2)]
    cleaners.extend(Cleaner(1 << 20, throttler=throttler) for _ in logs)
    with ThreadPoolExecutor(2) as pool:
        started = time.monotonic()
        done = list(pool.map(timed_clean, cleaners, logs))
        elapsed = time.monotonic() - started
    io_bytes = sum(b for _, b in done)
    assert io_bytes > 2_000_000
    assert elapsed >= (io_bytes - 400_000) / rate


def test_service_shares_one_budget_from_the_broker_config():
    from types import SimpleNamespace

    from klamm.config.broker import BrokerConfig

    config = BrokerConfig.from_properties({"log.cleaner.io.max.bytes.per.second": "12345",
                                           "log.cleaner.threads": "2"})
    service = LogCleanerService(SimpleNamespace(config=config))
    assert service.throttler.rate_per_sec == 12345
    assert [c.throttler for c in service.cleaners] == [service.throttler, service.throttler]
