"""A response as a send plan: encoded bytes interleaved with file regions.

A Fetch response carries record bytes straight from segment files. Instead of
reading them into Python, the response's `records` fields hold `FileRegion`
objects; the encoder leaves a hole for each, and the connection frames the
response as a list of parts — `bytes` to write, and `FileRegion`s for the
network layer to hand to `os.sendfile`.

A region holds a reference to its file (a `FileSource`: a descriptor and a way
to let go of it), not a bare descriptor number: the response may wait in the
connection's queue while its segment is deleted, and a number closed meanwhile
could name another file by the time it is sent. Whoever builds a region takes
the reference; the network layer releases it once the region is sent, or the
response dropped (`release_regions`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol


class FileSource(Protocol):
    def fileno(self) -> int: ...

    def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class FileRegion:
    """`length` bytes at `position` of `file` (a segment's .log file)."""

    file: FileSource
    position: int
    length: int

    def __len__(self) -> int:
        return self.length


Part = bytes | FileRegion


def regions_in(value: Any) -> Iterator[FileRegion]:
    """Every FileRegion in a response (nested dicts, lists and tuples; kio entities hold none)."""
    if isinstance(value, FileRegion):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from regions_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from regions_in(item)


def release_regions(value: Any) -> None:
    """Release the file references of every region in a response or a send plan."""
    for region in regions_in(value):
        region.file.release()
