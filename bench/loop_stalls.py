"""Run `klamm serve` and name what holds its event loop: every loop callback that runs longer than a
threshold, and where the loop thread was while it did.

    .venv/bin/python bench/loop_stalls.py --threshold-ms 1 --out stalls.json serve --override ...

Each callback the loop runs (asyncio.events.Handle._run: a task step, an I/O callback, a timer) is timed.
A watchdog thread looks at the callback running every 0.25 ms; one running past the threshold has the loop
thread's stack taken (sys._current_frames) every 0.5 ms while it goes on, so a stall is named by the frames
it spent its time in, not by where its task happened to stop. A stall that holds the GIL in Python code lets
the watchdog in only every switch interval (5 ms): the stacks of stalls shorter than that are often missing,
but their durations are counted. The summary (written at exit, and every LOOP_STALLS_WRITE_EVERY_S seconds
if set) groups stalls by the innermost klamm frames of their stacks: count, total and worst milliseconds, and
one full stack; its "timeline" has every stall's end (Unix time), duration and place, to pick out those of a
measured window, and "collections" every garbage collection over the threshold (generation, end, duration).

asyncio's own debug mode (loop.slow_callback_duration) names the same callbacks, but records a traceback
for every handle made, which slows every request several times over; this costs two clock reads per callback.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gc
import json
import os
import sys
import threading
import time
import traceback
from asyncio import events
from pathlib import Path

SAMPLE_S = 0.0005
# Writing the summary holds the interpreter lock for up to hundreds of milliseconds once there are many
# stalls with stacks, which then shows up as stalls of the loop (every 5 s when this was 5): by default it is
# written once, when the broker exits (SIGTERM, as bench/run.py stops it).
WRITE_EVERY_S = float(os.environ.get("LOOP_STALLS_WRITE_EVERY_S", "0"))


class StallSampler:
    def __init__(self, threshold_s: float, out: Path) -> None:
        self.threshold_s = threshold_s
        self.out = out
        self.current: tuple[object, float, int] | None = None  # (handle, start, sequence number)
        self.sequence = 0
        self.loop_thread = threading.get_ident()
        self.stalls: list[dict] = []  # each: ms, callback, stacks (lists of "file:line function")
        self.samples: dict[int, list[list[str]]] = {}
        self.callbacks = 0
        self.collection_started = 0.0
        self.collections: list[dict] = []  # garbage collections over the threshold
        self.lock = threading.Lock()
        # the loop thread's scheduler counters (/proc/thread-self/schedstat: ns on a CPU, ns waiting for one)
        # when the watchdog first saw a callback past the threshold, to split its time at the end
        self.schedstat_path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self.schedstat_at: dict[int, tuple[float, int, int]] = {}

    def install(self) -> None:
        sampler = self
        run = events.Handle._run

        def timed_run(handle: events.Handle) -> None:
            sampler.sequence += 1
            seq = sampler.sequence
            start = time.perf_counter()
            sampler.current = (handle, start, seq)
            try:
                run(handle)
            finally:
                sampler.current = None
                sampler.callbacks += 1
                took = time.perf_counter() - start
                if took >= sampler.threshold_s:
                    sampler.record(handle, took, seq)

        events.Handle._run = timed_run  # type: ignore[method-assign]
        gc.callbacks.append(self.time_collection)
        threading.Thread(target=self.watch, name="loop-stall-watchdog", daemon=True).start()
        if WRITE_EVERY_S > 0:
            threading.Thread(target=self.write_periodically, name="loop-stall-writer", daemon=True).start()
        atexit.register(self.write)

    def record(self, handle: object, took: float, seq: int) -> None:
        with self.lock:
            stacks = self.samples.pop(seq, [])
            seen = self.schedstat_at.pop(seq, None)
        split = {}
        if seen is not None:  # from the watchdog's first look to now: on a CPU, waiting for one, neither
            seen_at, on_cpu, waiting = seen
            now_on_cpu, now_waiting = _schedstat(self.schedstat_path)
            span = time.perf_counter() - seen_at
            on_cpu_ms, runqueue_ms = (now_on_cpu - on_cpu) / 1e6, (now_waiting - waiting) / 1e6
            split = {"seen_ms": round(span * 1000, 3), "on_cpu_ms": round(on_cpu_ms, 3),
                     "runqueue_ms": round(runqueue_ms, 3),
                     "off_cpu_ms": round(max(0.0, span * 1000 - on_cpu_ms - runqueue_ms), 3)}
        try:
            callback = repr(handle)[:300]
        except Exception:  # noqa: BLE001 - a repr of a half-torn-down object
            callback = type(handle).__name__
        self.stalls.append({"ms": round(took * 1000, 3), "at": time.time(), "callback": callback,
                            "stacks": stacks, **split})

    def time_collection(self, phase: str, info: dict[str, int]) -> None:
        """Every cyclic garbage collection over the threshold, in `collections` (it holds the lock throughout:
        the watchdog cannot sample a stall it causes)."""
        if phase == "start":
            self.collection_started = time.perf_counter()
            return
        took = time.perf_counter() - self.collection_started
        if took >= self.threshold_s:
            self.collections.append({"at": round(time.time(), 4), "ms": round(took * 1000, 3),
                                     "generation": info["generation"], "collected": info["collected"],
                                     "thread": threading.current_thread().name})

    def watch(self) -> None:
        while True:
            time.sleep(SAMPLE_S / 2)
            current = self.current
            if current is None:
                continue
            _handle, start, seq = current
            if time.perf_counter() - start < self.threshold_s:
                continue
            if seq not in self.schedstat_at:
                self.schedstat_at[seq] = (time.perf_counter(), *_schedstat(self.schedstat_path))
            frame = sys._current_frames().get(self.loop_thread)
            if frame is None:
                continue
            stack = [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)]
            with self.lock:
                samples = self.samples.setdefault(seq, [])
                if len(samples) < 200:
                    samples.append(stack)
            time.sleep(SAMPLE_S / 2)

    def write_periodically(self) -> None:
        while True:
            time.sleep(WRITE_EVERY_S)
            self.write()

    def summary(self) -> dict:
        groups: dict[str, dict] = {}
        timeline = []
        for stall in list(self.stalls):
            # the stall's heaviest place: the most frequent innermost-klamm frame of its samples
            places: dict[str, int] = {}
            for stack in stall["stacks"]:
                places[_place(stack)] = places.get(_place(stack), 0) + 1
            place = max(places, key=places.get) if places else "(not sampled) " + _callback_name(stall["callback"])
            timeline.append({"at": round(stall["at"], 4), "ms": stall["ms"], "place": place,
                             **{k: stall[k] for k in ("seen_ms", "on_cpu_ms", "runqueue_ms", "off_cpu_ms")
                                if k in stall}})
            group = groups.setdefault(place, {"place": place, "count": 0, "total_ms": 0.0, "max_ms": 0.0,
                                              "example_callback": "", "example_stack": []})
            group["count"] += 1
            group["total_ms"] = round(group["total_ms"] + stall["ms"], 3)
            if stall["ms"] > group["max_ms"]:
                group["max_ms"] = stall["ms"]
                group["example_callback"] = stall["callback"]
                group["example_stack"] = stall["stacks"][len(stall["stacks"]) // 2] if stall["stacks"] else []
        ranked = sorted(groups.values(), key=lambda g: -g["total_ms"])
        durations = sorted(s["ms"] for s in self.stalls)
        return {"threshold_ms": self.threshold_s * 1000, "callbacks": self.callbacks, "stalls": len(durations),
                "stall_ms_total": round(sum(durations), 3), "worst_ms": durations[-10:][::-1],
                "places": ranked, "timeline": timeline, "collections": list(self.collections)}

    def write(self) -> None:
        try:
            data = self.summary()
            tmp = self.out.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1))
            os.replace(tmp, self.out)
        except Exception:  # noqa: BLE001 - the broker must not die of its observer
            traceback.print_exc()


def _schedstat(path: str) -> tuple[int, int]:
    """A thread's nanoseconds on a CPU and waiting on a run queue (0, 0 where the kernel does not say)."""
    try:
        with open(path) as f:
            on_cpu, waiting, _slices = f.read().split()
        return int(on_cpu), int(waiting)
    except (OSError, ValueError):
        return 0, 0


def _place(stack: list[str]) -> str:
    """The innermost frames that are klamm's own, with the library frame they were in."""
    inner = [i for i, frame in enumerate(stack) if "site-packages" not in frame and not frame.startswith(
        ("threading.py", "events.py", "base_events.py", "selector_events.py", "loop_stalls.py"))]
    if not inner:
        return stack[-1] if stack else "?"
    last = inner[-1]
    return " < ".join(reversed(stack[max(0, last - 2):last + 2]))


def _callback_name(callback: str) -> str:
    for marker in ("coro=<", "<Handle ", "<TimerHandle "):
        if marker in callback:
            return callback[callback.index(marker) + len(marker):].split(" ")[0]
    return callback[:80]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold-ms", type=float, default=1.0, help="0: time nothing")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("klamm_args", nargs=argparse.REMAINDER, help="klamm's arguments (serve ...)")
    args = parser.parse_args()
    switch_ms = os.environ.get("LOOP_STALLS_SWITCH_INTERVAL_MS")  # an experiment: the GIL's switch interval
    if switch_ms:
        import klamm.cli.main

        sys.setswitchinterval(float(switch_ms) / 1000)
        klamm.cli.main.SWITCH_INTERVAL_S = float(switch_ms) / 1000  # else `serve` sets its own once started
    if args.threshold_ms > 0:  # 0: klamm alone, for a run with the switch interval changed and nothing else
        StallSampler(args.threshold_ms / 1000, args.out).install()
    assert asyncio  # the loop klamm makes runs the patched handles
    from klamm.cli.main import main as klamm_main

    return klamm_main(args.klamm_args)


if __name__ == "__main__":
    sys.exit(main())
