"""Every event-loop callback over a threshold while a topic of many partitions is created, and where it ran.

    .venv/bin/python bench/create_topic_callbacks.py [--topics 2] [--partitions 1000] [--threshold-ms 0.7]

Starts an embedded broker (klamm.testing.run_broker), times each callback its loop runs (asyncio's
Handle._run), and creates `--topics` topics one after the other with confluent-kafka's AdminClient, the garbage
collector off meanwhile (its pauses are bench/gc_partitions.py's subject). For a task's step it prints where the
task's coroutine chain stood before the step and where it stopped after it (file:line of the three innermost
frames), so a long step is named by the code between those two points; a step that ended its task shows
nothing after the arrow. The interpreter's switch interval is `klamm serve`'s: a thread making logs holds the
lock for up to that long while the loop waits. Run a before and an after by putting another tree first on
PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from asyncio import events
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from klamm.testing import run_broker


def where(coro: Any) -> str:
    """The innermost three frames of a coroutine chain, as file:line function."""
    frames = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            break
        frames.append(f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {frame.f_code.co_name}")
        if frame.f_code.co_name in ("__aenter__", "__aexit__") and hasattr(frame.f_locals.get("self"), "gen"):
            coro = frame.f_locals["self"].gen  # an asynccontextmanager's generator: its awaitable hides it
            continue
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return " > ".join(frames[-3:])


class CallbackTimer:
    def __init__(self, threshold_ms: float) -> None:
        self.threshold_ms = threshold_ms
        self.recording = False
        self.slow: list[tuple[float, str, str]] = []
        self._run = events.Handle._run

    def install(self) -> None:
        timer, run = self, self._run

        def timed(handle: Any) -> None:
            if not timer.recording:
                return run(handle)
            owner = getattr(handle._callback, "__self__", None)
            coro = owner.get_coro() if isinstance(owner, asyncio.Task) else None
            before = where(coro) if coro is not None else repr(handle._callback)[:100]
            started = time.perf_counter()
            try:
                return run(handle)
            finally:
                ms = (time.perf_counter() - started) * 1000
                if ms > timer.threshold_ms:
                    timer.slow.append((ms, before, where(coro) if coro is not None else ""))
        events.Handle._run = timed  # type: ignore[method-assign]


def main() -> None:
    from klamm.cli.main import SWITCH_INTERVAL_S
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--threshold-ms", type=float, default=0.7)
    args = parser.parse_args()
    timer = CallbackTimer(args.threshold_ms)
    timer.install()
    with run_broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("warm-up", 1, 1)])["warm-up"].result(30)
        for n in range(args.topics):
            time.sleep(0.5)
            gc.collect()
            gc.disable()
            timer.slow.clear()
            timer.recording = True
            try:
                admin.create_topics([NewTopic(f"wide-{n}", args.partitions, 1)])[f"wide-{n}"].result(120)
                time.sleep(0.3)
            finally:
                timer.recording = False
                gc.enable()
            slow = sorted(timer.slow, reverse=True)
            print(f"topic {n}: {len(slow)} callbacks over {args.threshold_ms} ms, "
                  f"{sum(ms for ms, _, _ in slow):.1f} ms in all")
            for ms, before, after in slow:
                print(f"  {ms:6.2f} ms  {before}  ->  {after}")


if __name__ == "__main__":
    main()
