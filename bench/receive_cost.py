"""What receiving large produce requests costs the broker's network layer: CPU and page faults per MB.

    .venv/bin/python bench/receive_cost.py [--frames 400] [--frame-kb 1000] [--hold-ms 20] [--rounds 3]

One process: a client thread writes N produce requests of about 1 MB (one batch each, as librdkafka sends
at batch.size=1000000) over a loopback socket to a `ClientConnection` on this loop, whose handler reads
the records and then, as an acks=all produce waiting for the ISR, holds the request for --hold-ms before
answering. Prints per round the process's user and system CPU and minor page faults per MB received.
With PYTHONPATH=<a checkout's copy> first, the same for other code (A/B), without a cluster or a lock.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import socket
import statistics
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH: other code can go first

from klamm.broker.handlers import produce as produce_handler  # noqa: E402
from klamm.broker.handlers import registry  # noqa: E402
from klamm.broker.network import ClientConnection, Processor  # noqa: E402
from klamm.protocol.connection import Request  # noqa: E402
from tests.unit.test_connection import PRODUCE, encode_request  # noqa: E402

SUPPORTED = {key: (api.min_version, api.max_version) for key, api in registry().items()}


def frame(correlation_id: int, size: int) -> bytes:
    return encode_request(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": bytes(size)}]}]}, correlation_id)


async def one_round(frames: int, size: int, hold_s: float) -> tuple[float, float, int]:
    let_go = getattr(produce_handler, "let_go_of_frames", None)  # in the code after the change only
    answered = 0

    async def handler(request: Request, _connection: ClientConnection) -> dict[str, Any]:
        nonlocal answered
        records = request.body.topic_data[0].partition_data[0].records
        assert len(records) == size
        if let_go is not None:
            let_go(request.body)
        await asyncio.sleep(hold_s)
        answered += 1
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}

    processor = Processor(0, handler, lambda: SUPPORTED, 1 << 22, 600_000, False)
    client, server = socket.socketpair()
    await asyncio.get_running_loop().connect_accepted_socket(lambda: ClientConnection(processor), server)
    data = [frame(i, size) for i in range(frames)]

    def send() -> None:
        for item in data:
            client.sendall(item)

    def drain() -> None:
        try:
            while client.recv(1 << 16):
                pass
        except OSError:  # closed at the end of the round
            pass

    before = resource.getrusage(resource.RUSAGE_SELF)
    sender = threading.Thread(target=send)
    reader = threading.Thread(target=drain, daemon=True)
    sender.start()
    reader.start()
    while answered < frames:
        await asyncio.sleep(0.005)
    after = resource.getrusage(resource.RUSAGE_SELF)
    sender.join()
    client.close()
    megabytes = frames * size / 1e6
    return ((after.ru_utime - before.ru_utime) / megabytes * 1e6, (after.ru_stime - before.ru_stime) / megabytes * 1e6,
            round((after.ru_minflt - before.ru_minflt) / megabytes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--frame-kb", type=int, default=1000)
    ap.add_argument("--hold-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    import klamm
    print(f"klamm from {Path(klamm.__file__).parent}; {opts.frames} frames of {opts.frame_kb} kB, held "
          f"{opts.hold_ms} ms (CPU of the whole process, the sending thread's included)")
    results = []
    for index in range(opts.rounds):
        user, system, faults = asyncio.run(one_round(opts.frames, opts.frame_kb * 1000, opts.hold_ms / 1000))
        results.append(user + system)
        print(f"round {index}: user {user:.0f} us/MB, system {system:.0f} us/MB, {faults} page faults/MB", flush=True)
        time.sleep(0.2)
    print(f"median user+system: {statistics.median(results):.0f} us/MB")


if __name__ == "__main__":
    main()
