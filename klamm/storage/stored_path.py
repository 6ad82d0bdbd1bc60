"""A `Path` attribute kept as its string.

Every segment keeps four file paths for as long as it lives. A `pathlib.Path` is two objects the cyclic garbage
collector tracks (the path and the list of its parts), so at 10,000 segments they were 80,000 of the 140,000
objects a full collection walks on the event loop (~100 ms, BENCHMARKS.md). A string is not tracked; the Path
is made again when asked for, which the storage code does off the request path (opens, renames, unlinks).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class StoredPath:
    """Descriptor: reads give a `Path`, writes take a `Path` or `str`; the instance holds a `str`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attribute = "_" + name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return Path(getattr(instance, self._attribute))

    def __set__(self, instance: Any, value: str | os.PathLike[str]) -> None:
        setattr(instance, self._attribute, os.fspath(value))
