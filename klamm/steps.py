"""Work done in steps on the event loop: a generator that yields between two steps and returns its result.

A walk over thousands of partitions in one callback holds every connection's requests for milliseconds. Written
as steps, the same walk runs in one go where nothing waits on it (`run_steps`), or `slice_s` of the loop's time
a turn where requests do (`in_slices`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import TypeVar

__all__ = ["Steps", "in_slices", "run_steps"]

T = TypeVar("T")
Steps = Generator[None, None, T]


def run_steps(steps: Steps[T]) -> T:
    """The steps run to the end in one go; their value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


async def in_slices(steps: Steps[T], slice_s: float) -> T:
    """The steps run `slice_s` of the loop's time a turn; their value."""
    stop = time.perf_counter() + slice_s
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        if time.perf_counter() >= stop:
            await asyncio.sleep(0)
            stop = time.perf_counter() + slice_s
