"""klamm serve's SlowCollectionFreezer: a slow full collection freezes its survivors, never garbage."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from klamm.cli.collector import SlowCollectionFreezer


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector frees it


class SteppingClock:
    """Each reading `step` seconds after the last: a collection lasts `step`."""

    def __init__(self, step: float) -> None:
        self.step, self.now = step, 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def collect_with(freezer: SlowCollectionFreezer, generation: int = 2) -> SlowCollectionFreezer:
    freezer.install()
    try:
        gc.collect(generation)
    finally:
        freezer.uninstall()
    return freezer


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # what a test froze goes back to the collector


def test_a_slow_full_collection_freezes_the_live_objects_and_collects_the_garbage(unfrozen: None) -> None:
    alive = [Node() for _ in range(1000)]
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    freezer = collect_with(SlowCollectionFreezer(threshold_s=0.01, clock=SteppingClock(0.02)))
    assert gone() is None
    assert freezer.freezes == 1
    assert gc.get_freeze_count() >= len(alive)
    # frozen objects are out of the full passes: they are not among those a collection walks
    assert not any(o is alive[0] for o in gc.get_objects(generation=2))


def test_a_fast_full_collection_or_a_young_one_freezes_nothing(unfrozen: None) -> None:
    alive = [Node() for _ in range(1000)]
    fast = collect_with(SlowCollectionFreezer(threshold_s=0.01, clock=SteppingClock(0.001)))
    slow = collect_with(SlowCollectionFreezer(threshold_s=0.01, clock=SteppingClock(0.02)), generation=1)  # young
    assert fast.freezes == slow.freezes == 0
    assert gc.get_freeze_count() == 0
    assert alive


def test_uninstall_is_idempotent() -> None:
    freezer = SlowCollectionFreezer()
    freezer.install()
    freezer.uninstall()
    freezer.uninstall()
    assert freezer not in gc.callbacks
