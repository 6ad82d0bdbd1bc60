"""CPU the network layer adds to a request: ClientConnection with a handler that answers at once.

    .venv/bin/python bench/network_dispatch_cost.py [--requests N]

A `ClientConnection` on one end of a socketpair, an asyncio client on the other, in one process and loop; the
handler returns an empty ApiVersions answer without waiting, so what is measured is reading, dispatching,
answering and writing (plus the client's own send and read, the same for every version of the server side).
Prints process CPU µs per request, best of three, for requests sent one at a time, four in flight, and in
bursts of eight frames per write. Runs the klamm that `import klamm` finds: PYTHONPATH=<worktree> compares
another commit (its Processor need not take `run_at_once`).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import io
import socket
import struct
import time
from typing import Any

from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from klamm.broker.handlers import registry
from klamm.broker.network import ClientConnection, Processor
from klamm.protocol.api import message_types
from klamm.protocol.build import build

API_VERSIONS = 18
ANSWER = {"error_code": 0}


def api_versions_frame(correlation_id: int) -> bytes:
    types = message_types(API_VERSIONS, 3)
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=API_VERSIONS, request_api_version=3,
                                                     correlation_id=correlation_id, client_id="bench"))
    entity_writer(types.request)(out, build(types.request, {"client_software_name": "bench",
                                                            "client_software_version": "1"}))
    return struct.pack(">i", out.tell()) + out.getvalue()


async def answer_at_once(_request: Any, _connection: Any) -> dict[str, int]:
    return ANSWER


async def cost(requests: int, in_flight: int, burst: int) -> float:
    """Process CPU µs per request."""
    supported = {key: (api.min_version, api.max_version) for key, api in registry().items()}
    extra = {"run_at_once": frozenset({API_VERSIONS})} if "run_at_once" in inspect.signature(Processor).parameters \
        else {}
    processor = Processor(0, answer_at_once, lambda: supported, 1 << 20, 600_000, True, None, **extra)
    server, client = socket.socketpair()
    loop = asyncio.get_running_loop()
    await loop.connect_accepted_socket(lambda: ClientConnection(processor), server)
    reader, writer = await asyncio.open_connection(sock=client)
    write = b"".join(api_versions_frame(i) for i in range(burst))
    started, done = time.process_time(), 0
    while done < requests:
        for _ in range(in_flight):
            writer.write(write)
        for _ in range(in_flight * burst):
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
        done += in_flight * burst
    elapsed = time.process_time() - started
    writer.close()
    return elapsed / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    for in_flight, burst in ((1, 1), (4, 1), (1, 8)):
        runs = [asyncio.run(cost(args.requests, in_flight, burst)) for _ in range(3)]
        print(f"{in_flight} in flight, {burst} frame(s) a write: {min(runs):.1f} µs a request "
              f"(runs {', '.join(f'{r:.1f}' for r in runs)})")


if __name__ == "__main__":
    main()
