"""A response as a send plan: encoded bytes interleaved with file regions.

A Fetch response carries record bytes straight from segment files. Instead of
reading them into Python, the response's `records` fields hold `FileRegion`
objects; encoding the response through a `SendPlanWriter` yields a list of
parts — `bytes` to write, and `FileRegion`s for the network layer to hand to
`os.sendfile`. kio's writers call `len(value)` for the size prefix and then
`buffer.write(value)`, which is all a `FileRegion` has to support.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileRegion:
    """`length` bytes at `position` of the open file `fd` (a segment's .log file)."""

    fd: int
    position: int
    length: int

    def __len__(self) -> int:
        return self.length


Part = bytes | FileRegion


class SendPlanWriter:
    """A write-only buffer (kio's `Writable`) that keeps file regions apart."""

    __slots__ = ("_parts", "_current", "size")

    def __init__(self) -> None:
        self._parts: list[Part] = []
        self._current = bytearray()
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview | FileRegion) -> int:
        length = len(data)
        self.size += length
        if isinstance(data, FileRegion):
            if self._current:
                self._parts.append(bytes(self._current))
                self._current = bytearray()
            if length:
                self._parts.append(data)
        else:
            self._current += data
        return length

    def parts(self) -> list[Part]:
        if self._current:
            self._parts.append(bytes(self._current))
            self._current = bytearray()
        return self._parts
