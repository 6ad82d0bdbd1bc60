"""The cleaner's shared throttler lock (a multiprocessing lock of the spawn context) starts Python's resource
tracker, a process of its own; a broker that never compacts must not have one. The broker runs in a child
process here, so this process's own tracker (other cleaner tests start one) does not count."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
    import glob, json, os, sys, time

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from klamm.testing import run_broker


    def children():
        """The command lines of this process's children (every thread's), from /proc."""
        pids = []
        for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
            with open(path) as f:
                pids += f.read().split()
        lines = []
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    lines.append(f.read().replace(b"\\0", b" ").decode())
            except FileNotFoundError:
                pass  # gone meanwhile
        return lines


    if __name__ == "__main__":  # the cleaner process (spawned) imports this file again
        compacted = sys.argv[1] == "compacted"
        with run_broker(log_cleaner_backoff_ms=10) as b:
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            # segments roll every 100 ms: the records of the first rounds end in inactive, dirty segments
            configs = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01"}
            admin.create_topics([NewTopic("t", 1, 1, config=configs if compacted else {})])["t"].result(15)
            producer = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
            for round_ in range(3):
                for n in range(50):
                    producer.produce("t", key=b"k%d" % (n % 5), value=b"v" * 100)
                assert producer.flush(15) == 0
                time.sleep(0.2)
            deadline = time.monotonic() + 30
            while compacted and b.broker.log_cleaner.runs == 0:
                assert time.monotonic() < deadline, "never cleaned"
                time.sleep(0.05)
            time.sleep(0.5)  # the cleaner workers go round their backoff many times
            print(json.dumps(children()))
''')


def children_of_a_broker(tmp_path: Path, mode: str) -> list[str]:
    script = tmp_path / "broker_children.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), mode], check=False, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_broker_that_never_compacts_starts_no_resource_tracker(tmp_path: Path) -> None:
    assert not [c for c in children_of_a_broker(tmp_path, "plain") if "resource_tracker" in c]


def test_a_broker_that_compacts_starts_one_when_it_first_cleans(tmp_path: Path) -> None:
    # the check above can see one: the first cleaning starts the cleaner process, and the tracker with it
    children = children_of_a_broker(tmp_path, "compacted")
    assert [c for c in children if "resource_tracker" in c]


def test_a_copy_made_before_the_budget_shares_it() -> None:
    from klamm.storage.cleaner import PROCESS_CONTEXT
    from klamm.storage.throttler import Throttler

    now = [0]
    throttler = Throttler(1000.0, check_interval_ms=1, clock_ns=lambda: now[0], sleep=lambda s: None,
                          context=PROCESS_CONTEXT)
    copy = throttler.with_sleep(lambda s: None)  # as the cleaner process makes its own, before any use
    throttler.maybe_throttle(500)  # the budget is made: its first period starts now
    now[0] = 2_000_000  # 2 ms on
    copy.maybe_throttle(500)  # 1000 bytes of the one budget in 2 ms: slept to fit 1 kB/s
    assert copy.slept_ms == 998
