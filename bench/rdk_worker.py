"""librdkafka (confluent-kafka) benchmark worker.

Run by bench/run.py in a subprocess so that a hung client can be killed by a
timeout.  Same modes and arguments as bench/java/KlammBench.java:

    python bench/rdk_worker.py produce bootstrap=H:P topic=T records=N size=B acks=1 [producers=P partitions=N]
    python bench/rdk_worker.py consume bootstrap=H:P topic=T expect=N
    python bench/rdk_worker.py latency bootstrap=H:P topic=T records=N size=B interval_us=1000 warmup=500
    python bench/rdk_worker.py load bootstrap=H:P topic=T seconds=S rate=R size=B keys=K   (librdkafka only)

Prints exactly one JSON line on stdout.  Client settings are fixed here so that
every broker is driven by the same client configuration.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
import traceback

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

# librdkafka's defaults are already a sensible batching setting (linger.ms=5,
# batch.size=1000000); they are spelled out so both clients are comparable.
PRODUCER_CONF = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "enable.idempotence": False,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.timeout.ms": 120_000,
}

# confluent-kafka insists on a group.id even for assign(); the group is never
# joined (no subscribe) and no offsets are committed.
CONSUMER_CONF = {
    "group.id": "klamm-bench-assign",
    "enable.auto.commit": False,
    "enable.partition.eof": False,
    "auto.offset.reset": "earliest",
}

HDR = struct.Struct(">qq")  # (sequence, produce time in ns)


def _producer(args: dict, **extra) -> Producer:
    conf = {"bootstrap.servers": args["bootstrap"], **PRODUCER_CONF, **extra}
    return Producer(conf)


def _consumer(args: dict) -> Consumer:
    conf = {"bootstrap.servers": args["bootstrap"], **CONSUMER_CONF}
    if "fetch_wait_ms" in args:
        conf["fetch.wait.max.ms"] = int(args["fetch_wait_ms"])
    conf.update({k.removeprefix("rdk."): v for k, v in args.items() if k.startswith("rdk.")})
    return Consumer(conf)


def produce(args: dict) -> dict:
    topic = args["topic"]
    n = int(args["records"])
    size = int(args.get("size", 100))
    acks = args.get("acks", "1")
    # producers=P partitions=N: P clients (one connection each) take the records in turn, each spreading its
    # share over partitions 0..N-1, so the broker sees P times the requests, each of N small batches.
    clients = int(args.get("producers", 1))
    partitions = int(args.get("partitions", 1))
    producers = [_producer(args, acks=acks) for _ in range(clients)]
    for p in producers:  # fetch metadata before starting the clock
        p.list_topics(topic, timeout=30)
    value = os.urandom(size)
    errors = [0, None]

    def on_delivery(err, _msg):
        if err is not None:
            errors[0] += 1
            if errors[1] is None:
                errors[1] = str(err)

    t0 = time.perf_counter()
    if clients == 1 and partitions == 1:  # the single-producer rows: the tightest loop
        produce_, poll = producers[0].produce, producers[0].poll
        for _ in range(n):
            while True:
                try:
                    produce_(topic, value, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            poll(0)
    else:
        for i in range(n):
            p = producers[i % clients]
            while True:
                try:
                    p.produce(topic, value, partition=(i // clients) % partitions, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.001)
            p.poll(0)
    remaining = sum(p.flush(180) for p in producers)
    secs = time.perf_counter() - t0
    return {
        "ok": errors[0] == 0 and remaining == 0,
        "mode": "produce",
        "records": n,
        "bytes": n * size,
        "seconds": secs,
        "errors": errors[0],
        "undelivered": remaining,
        "first_error": errors[1],
    }


def consume(args: dict) -> dict:
    topic = args["topic"]
    expect = int(args.get("expect", 0))
    timeout = float(args.get("timeout_ms", 600_000)) / 1000
    c = _consumer(args)
    try:
        # The high watermark is only informational (Tansu 0.6 under-reports it);
        # with expect=N the consumer reads until N records arrived or it times out.
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        target = expect or high
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        count = 0
        nbytes = 0
        t0 = time.perf_counter()
        deadline = t0 + timeout
        first_error = None
        while count < target:
            msgs = c.consume(num_messages=10_000, timeout=0.5)
            for m in msgs:
                if m.error() is not None:
                    first_error = first_error or str(m.error())
                    continue
                count += 1
                nbytes += len(m.value())
            if time.perf_counter() > deadline:
                break
        secs = time.perf_counter() - t0
        if count < target and first_error is None:
            first_error = f"read {count} of {target} records before the timeout"
        return {
            "ok": count >= target,
            "mode": "consume",
            "records": count,
            "bytes": nbytes,
            "seconds": secs,
            "expected": target,
            "high_watermark": high,
            "first_error": first_error,
        }
    finally:
        c.close()


def latency(args: dict) -> dict:
    topic = args["topic"]
    n = int(args["records"])
    size = max(HDR.size, int(args.get("size", 100)))
    interval = int(args.get("interval_us", 1000)) / 1e6
    timeout = float(args.get("timeout_ms", 120_000)) / 1000
    pad = b"\0" * (size - HDR.size)
    lat = [None] * n
    state = {"received": 0, "error": None}
    warm = threading.Event()
    stop = threading.Event()

    def consumer_loop():
        try:
            c = _consumer(args)
            c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            try:
                # poll(), not consume(num_messages=...): a batch consume waits for the
                # whole batch or the timeout, which would add up to 100 ms here.
                while not stop.is_set() and state["received"] < n:
                    m = c.poll(0.1)
                    if m is None:
                        continue
                    now = time.perf_counter_ns()
                    if m.error() is None:
                        seq, ts = HDR.unpack_from(m.value())
                        if seq < 0:
                            warm.set()
                        elif seq < n and lat[seq] is None:
                            lat[seq] = now - ts
                            state["received"] += 1
            finally:
                c.close()
        except Exception as e:  # noqa: BLE001
            state["error"] = repr(e)

    t = threading.Thread(target=consumer_loop, daemon=True)
    t.start()
    p = _producer(args, acks=args.get("acks", "1"), **{"linger.ms": 0})
    errs = [0]

    def on_delivery(err, _msg):
        if err is not None:
            errs[0] += 1

    # Warm-up record: establishes both connections before the clock starts.
    p.produce(topic, HDR.pack(-1, 0) + pad, partition=0)
    if p.flush(30) != 0:
        raise RuntimeError("warm-up record not delivered")
    warm_deadline = time.monotonic() + 30
    while not warm.wait(0.05):
        if state["error"] is not None or time.monotonic() > warm_deadline:
            stop.set()
            raise RuntimeError(f"warm-up record never consumed ({state['error']})")
    # Then `warmup` paced records that are not measured (connections, JIT, caches).
    warmup = int(args.get("warmup", 500))
    start = time.perf_counter() + warmup * interval
    for i in range(-warmup, n):
        due = start + i * interval
        while True:
            left = due - time.perf_counter()
            if left <= 0:
                break
            if left > 0.0002:
                time.sleep(left - 0.0001)
        p.produce(topic, HDR.pack(i, time.perf_counter_ns()) + pad, partition=0, on_delivery=on_delivery)
        p.poll(0)
    p.flush(60)
    deadline = time.perf_counter() + timeout
    while state["received"] < n and state["error"] is None and time.perf_counter() < deadline:
        time.sleep(0.01)
    stop.set()
    t.join(10)
    if state["error"] is not None:
        raise RuntimeError(state["error"])
    vals = sorted(v for v in lat if v is not None)
    if not vals:
        return {"ok": False, "error": "no records received"}

    def pct(p_):
        idx = max(0, min(len(vals) - 1, -(-p_ * len(vals) // 100) - 1))
        return vals[int(idx)] / 1e6

    return {
        "ok": len(vals) == n and errs[0] == 0,
        "mode": "latency",
        "records": n,
        "received": len(vals),
        "errors": errs[0],
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "p999_ms": pct(99.9),
        "max_ms": vals[-1] / 1e6,
        "mean_ms": sum(vals) / len(vals) / 1e6,
    }


def load(args: dict) -> dict:
    """Background load for a compacted topic: keyed records (K distinct keys), lz4, paced at
    `rate` records/s for `seconds` (or until killed); batches of ~rate/200 records at linger 5 ms."""
    topic = args["topic"]
    seconds = float(args.get("seconds", 30))
    rate = int(args.get("rate", 20_000))
    size = int(args.get("size", 200))
    keys = int(args.get("keys", 10_000))
    p = _producer(args, acks="1", **{"compression.type": "lz4"})
    p.list_topics(topic, timeout=30)
    value = os.urandom(size)
    errs = [0]

    def on_delivery(err, _msg):
        if err is not None:
            errs[0] += 1

    start = time.perf_counter()
    sent = 0
    try:
        while True:
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
            due = int(elapsed * rate)
            while sent < due:
                try:
                    p.produce(topic, value, key=b"key-%d" % (sent % keys), partition=0, on_delivery=on_delivery)
                    sent += 1
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
            time.sleep(0.002)
    except KeyboardInterrupt:  # bench/run.py stops the load with SIGINT once the measurement is done
        pass
    p.flush(60)
    return {"ok": errs[0] == 0, "mode": "load", "records": sent, "errors": errs[0],
            "seconds": round(time.perf_counter() - start, 3)}


MODES = {"produce": produce, "consume": consume, "latency": latency, "load": load}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in MODES:
        print(__doc__, file=sys.stderr)
        return 2
    args = dict(a.split("=", 1) for a in argv[2:])
    try:
        out = MODES[argv[1]](args)
    except (Exception, KafkaException) as e:  # noqa: BLE001
        traceback.print_exc()
        out = {"ok": False, "error": repr(e)}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
