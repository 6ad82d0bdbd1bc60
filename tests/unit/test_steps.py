"""klamm.steps: work in steps, run in one go or a slice of the loop's time a turn, and a walk of a mapping a
number of values a step."""

from __future__ import annotations

import asyncio

from klamm.steps import Steps, each_value, in_slices, run_steps


def counted(steps: int) -> Steps[int]:
    for _ in range(steps):
        yield
    return steps


def test_run_steps_runs_every_step_and_gives_the_value() -> None:
    assert run_steps(counted(5)) == 5


def test_in_slices_hands_the_loop_back_between_slices() -> None:
    turns = 0

    async def watch() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async def run() -> int:
        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0)
        try:
            return await in_slices(counted(10), 0.0)
        finally:
            watcher.cancel()

    assert asyncio.run(run()) == 10
    assert turns >= 10


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
