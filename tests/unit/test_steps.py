"""klamm.steps: work in steps, run in one go or a slice of the loop's time a turn, and a walk of a mapping a
number of values a step."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from klamm.steps import Steps, each_value, in_slices, run_steps

T = TypeVar("T")


class Turns:
    """While entered, `count` is how many turns of the loop another task has had: work done in one callback gives
    it one at most."""

    def __init__(self) -> None:
        self.count = 0
        self._watcher: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> Turns:
        self._watcher = asyncio.create_task(self._watch())
        await asyncio.sleep(0)
        self.count = 0
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._watcher is not None
        self._watcher.cancel()


async def counting_turns(work: Awaitable[T]) -> tuple[T, int]:
    """`work`'s value, and how many turns of the loop another task had while it ran (`Turns`)."""
    async with Turns() as turns:
        value = await work
        return value, turns.count


def counted(steps: int) -> Steps[int]:
    for _ in range(steps):
        yield
    return steps


def test_run_steps_runs_every_step_and_gives_the_value() -> None:
    assert run_steps(counted(5)) == 5


def test_in_slices_hands_the_loop_back_between_slices() -> None:
    value, turns = asyncio.run(counting_turns(in_slices(counted(10), 0.0)))
    assert value == 10 and turns >= 10


def test_each_value_walks_the_keys_it_began_with_as_they_are_when_reached() -> None:
    mapping = {n: f"v{n}" for n in range(10)}
    seen: list[str] = []
    steps = each_value(mapping, 3, seen.append)
    next(steps)
    assert seen == ["v0", "v1"]  # a step is three values: the first stops before its third
    del mapping[5]
    mapping[6] = "replaced"
    mapping[10] = "added after the walk began"
    run_steps(steps)
    assert seen == ["v0", "v1", "v2", "v3", "v4", "replaced", "v7", "v8", "v9"]
