"""A response as a send plan: encoded bytes interleaved with file regions.

A Fetch response carries record bytes straight from segment files. Instead of
reading them into Python, the response's `records` fields hold `FileRegion`
objects; the encoder leaves a hole for each, and the connection frames the
response as a list of parts — `bytes` to write, and `FileRegion`s for the
network layer to hand to `os.sendfile`.
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
