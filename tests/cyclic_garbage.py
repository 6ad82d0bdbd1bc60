"""What a block of code leaves in reference cycles, named by type (for tests that there is none of theirs)."""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Iterator


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[Counter[str]]:
    """Collect, then run the block with the collector off; after it, the Counter holds the type names of what a
    collection finds unreachable (kept to be named with DEBUG_SAVEALL, then dropped)."""
    found: Counter[str] = Counter()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.update(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
