"""Where the CPU of a replicated produce goes: per broker process, user and system time.

    flock /tmp/klamm-heavy.lock .venv/bin/python bench/rf3_profile.py [--records N] [--runs K]
        [--py-spy DIR] [--klamm-override KEY=VALUE ...] [--client librdkafka|java]

Starts the three-process cluster of `bench/run.py --only klamm-rf3` (node 1 broker and
controller, nodes 2 and 3 brokers, RF=3, min.insync.replicas=2), then, per run, creates
a fresh topic and produces N 1 KB records with acks=all through bench/run.py's worker
of the client (--client: librdkafka, the default, or java). Prints per run the throughput and, per node and role (leader or
follower of the topic), CPU microseconds per record split into user and system
(/proc/<pid>/stat), so kernel time (pwrite, sendfile, sockets) and Python time can be
told apart. With --py-spy, each node is sampled during the last run (200 Hz) into
DIR/node<id>.txt (py-spy's raw collapsed stacks); with --perf FILE, the whole machine is
sampled (perf record -a -g, --perf-frequency per second) for as long.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run as bench  # bench/run.py: the cluster and the client worker


def cpu_split(pid: int) -> tuple[float, float, int]:
    """(user seconds, system seconds, minor page faults) of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7])


def machine_cpu() -> list[int]:
    """Jiffies of the whole machine: user, nice, system, idle, iowait, irq, softirq, steal."""
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def leader_of(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return admin.list_topics(topic, timeout=5).topics[topic].partitions[0].leader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--py-spy", type=Path, default=None)
    ap.add_argument("--py-spy-seconds", type=int, default=5)
    ap.add_argument("--perf", type=Path, default=None, help="perf record -a -g of the last run into this file")
    ap.add_argument("--perf-frequency", type=int, default=499, help="perf record's samples per second")
    ap.add_argument("--klamm-override", action="append", default=[])
    ap.add_argument("--client", choices=bench.CLIENTS, default="librdkafka", help="the producing client")
    opts = ap.parse_args()
    java_cmd = bench.ensure_java() if opts.client == "java" else None
    logdir = Path(tempfile.mkdtemp(prefix="klamm-rf3-profile-"))
    cluster = bench.ClusterBroker("klamm-rf3", logdir, opts.klamm_override)
    print(f"load average at start: {Path('/proc/loadavg').read_text().strip()}", flush=True)
    cluster.start()
    try:
        for run in range(opts.runs):
            topic = f"rf3-profile-{run}-{int(time.time())}"
            bench.create_topic(cluster.bootstrap, topic, replication_factor=3)
            leader = leader_of(cluster.bootstrap, topic)
            before = {pid: cpu_split(pid) for pid in cluster.pids()}
            machine_before = machine_cpu()
            spies = []
            if opts.py_spy is not None and run == opts.runs - 1:
                opts.py_spy.mkdir(parents=True, exist_ok=True)
                for node_id, pid in enumerate(cluster.pids(), 1):
                    spies.append(subprocess.Popen(
                        [str(bench.VENV_BIN / "py-spy"), "record", "-r", "200", "-d", str(opts.py_spy_seconds),
                         "-p", str(pid), "--format", "raw", "-o", str(opts.py_spy / f"node{node_id}.txt")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            if opts.perf is not None and run == opts.runs - 1:
                spies.append(subprocess.Popen(
                    ["perf", "record", "-a", "-g", "-F", str(opts.perf_frequency), "-o", str(opts.perf), "--", "sleep",
                     str(opts.py_spy_seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            result = bench.run_client(opts.client, java_cmd, "produce",
                                      {"bootstrap": cluster.bootstrap, "topic": topic, "records": opts.records,
                                       "size": 1024, "acks": "all"}, 600, logdir, f"run{run}", cluster)
            after = {pid: cpu_split(pid) for pid in cluster.pids()}
            machine = [b - a for a, b in zip(machine_before, machine_cpu())]
            for spy in spies:
                spy.wait()
            if not result.get("ok"):
                print(json.dumps(result), flush=True)
                continue
            seconds = result["seconds"]
            line = [(f"run {run}: {result['bytes'] / seconds / 1e6:.1f} MB/s, {opts.records / seconds:,.0f} rec/s, "
                     f"{seconds:.2f} s")]
            total = 0.0
            for node_id, pid in enumerate(cluster.pids(), 1):
                user = after[pid][0] - before[pid][0]
                system = after[pid][1] - before[pid][1]
                total += user + system
                role = "leader" if node_id == leader else "follower"
                faults = after[pid][2] - before[pid][2]
                line.append(f"node {node_id} ({role}): user {user / opts.records * 1e6:.2f} us/rec, "
                            f"sys {system / opts.records * 1e6:.2f} us/rec, "
                            f"{faults / opts.records * 1000:.0f} page faults per 1000 rec")
            line.append(f"all brokers: {total / opts.records * 1e6:.2f} us/rec")
            if result.get("client_metrics"):
                line.append(f"client: {json.dumps(result['client_metrics'])}")
            busy = sum(machine) or 1
            line.append("machine (both cores, every process): " + ", ".join(
                f"{name} {100 * value / busy:.0f} %" for name, value in
                zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), machine) if value))
            print("\n    ".join(line), flush=True)
    finally:
        cluster.stop()
    print(f"load average at end: {Path('/proc/loadavg').read_text().strip()}", flush=True)


if __name__ == "__main__":
    main()
