#!/usr/bin/env python3
"""Docker HEALTHCHECK: the broker answers an ApiVersions v0 request with error code 0.

Standard library only, so it runs in the image without klamm's imports (fast,
and it tests the listener, not the Python package). Exit 0 healthy, 1 not.

    python healthcheck.py [host] [port] [--tls CAFILE]      (defaults: 127.0.0.1 9092, plaintext)

With --tls the listener is SSL or SASL_SSL: the broker's certificate is verified against CAFILE
(ApiVersions is answered before SASL authentication, as in Kafka).
"""

from __future__ import annotations

import socket
import ssl
import struct
import sys

API_VERSIONS = 18
CORRELATION_ID = 0x4B4C4D  # any value: the response must echo it
CLIENT_ID = b"klamm-healthcheck"


def api_versions_v0_request() -> bytes:
    # request header v1: api_key, api_version, correlation_id, client_id (int16 length + bytes); v0 body is empty
    header = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(CLIENT_ID)) + CLIENT_ID
    return struct.pack(">i", len(header)) + header


def read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed before the full response")
        data += chunk
    return data


def check(host: str, port: int, timeout: float = 5.0, cafile: str | None = None) -> str:
    """Return a description of the answer; raise on anything but a healthy broker."""
    with socket.create_connection((host, port), timeout=timeout) as plain:
        sock = plain
        if cafile is not None:
            context = ssl.create_default_context(cafile=cafile)
            context.check_hostname = False  # the certificate names the advertised host, not 127.0.0.1
            sock = context.wrap_socket(plain)
        sock.sendall(api_versions_v0_request())
        (size,) = struct.unpack(">i", read_exactly(sock, 4))
        response = read_exactly(sock, size)
    # response header v0: correlation_id; body v0: error_code, [api_key, min_version, max_version]
    correlation_id, error_code, count = struct.unpack_from(">ihi", response)
    if correlation_id != CORRELATION_ID:
        raise ValueError(f"correlation id {correlation_id} != {CORRELATION_ID}")
    if error_code != 0:
        raise ValueError(f"ApiVersions error code {error_code}")
    keys = {struct.unpack_from(">h", response, 10 + 6 * i)[0] for i in range(count)}
    if 0 not in keys or 1 not in keys:
        raise ValueError("the broker does not offer Produce and Fetch")
    return f"ok: {count} APIs"


def main(argv: list[str]) -> int:
    cafile = None
    if "--tls" in argv:
        at = argv.index("--tls")
        cafile, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    host = argv[1] if len(argv) > 1 else "127.0.0.1"
    port = int(argv[2]) if len(argv) > 2 else 9092
    try:
        print(check(host, port, cafile=cafile))
    except (OSError, ValueError, struct.error, IndexError) as exc:
        print(f"unhealthy: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
