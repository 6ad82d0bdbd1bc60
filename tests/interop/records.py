"""Deterministic test records shared by every client in the interop tests.

Must match KlammClient.java (key/value/headers).  Record i of a stream with
``prefix``: key None when i % 5 == 4, value None when i % 7 == 6, no headers
when i % 3 == 2, and an extra header with a null value when i % 6 == 0.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

FILLER = b"0123456789abcdefghijklmnopqrstuvwxyz"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def key(prefix: str, i: int) -> bytes | None:
    if i % 5 == 4:
        return None
    return f"{prefix}-key-{i}".encode()


def value(prefix: str, i: int, size: int = 0) -> bytes | None:
    if i % 7 == 6:
        return None
    base = f"{prefix}-value-{i}".encode()
    if size <= 0:
        return base
    if size <= len(base):
        return base[:size]
    n = size - len(base)
    fill = FILLER * (n // len(FILLER) + 1)
    return base + fill[:n]


def headers(i: int, null_header: bool = True) -> list[tuple[str, bytes | None]]:
    if i % 3 == 2:
        return []
    h: list[tuple[str, bytes | None]] = [("idx", str(i).encode()), ("bin", bytes([i % 256, 0, 255]))]
    if i % 6 == 0 and null_header:
        h.append(("nullh", None))
    return h


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def expected(prefix: str, count: int, size: int = 0, *, null_header: bool = True,
             both_null: bool = True) -> list[Rec]:
    """The records of a stream.  kafka-python can produce neither null header values
    (null_header=False drops that header) nor records whose key and value are both
    null (both_null=False makes such a value b"" instead)."""
    out = []
    for i in range(count):
        k, v = key(prefix, i), value(prefix, i, size)
        if k is None and v is None and not both_null:
            v = b""
        out.append(Rec(k, v, tuple(headers(i, null_header))))
    return out


def norm_headers(h) -> tuple[tuple[str, bytes | None], ...]:
    """Normalize client header representations (None, list of tuples, str/bytes values)."""
    if not h:
        return ()
    out = []
    for k, v in h:
        if isinstance(k, bytes):
            k = k.decode()
        if isinstance(v, str):
            v = v.encode()
        out.append((k, None if v is None else bytes(v)))
    return tuple(out)


def b64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def from_java(obj: dict) -> Rec:
    return Rec(b64(obj["key"]), b64(obj["value"]), tuple((k, b64(v)) for k, v in obj["headers"]))


def diff(got: list[Rec], want: list[Rec], limit: int = 5) -> str:
    """Human readable first differences, '' when equal."""
    lines = []
    if len(got) != len(want):
        lines.append(f"count: got {len(got)}, want {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            lines.append(f"record {i}: got {_short(g)} want {_short(w)}")
            if len(lines) >= limit:
                break
    return "\n".join(lines)


def _short(r: Rec) -> str:
    def s(b):
        if b is None:
            return "None"
        return repr(b[:40] + (b"..." if len(b) > 40 else b"")) + f"[{len(b)}]"
    return f"Rec(key={s(r.key)}, value={s(r.value)}, headers={r.headers})"
