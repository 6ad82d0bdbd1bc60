"""The asyncio side of a coordinator's timers: sleep until the next deadline, then fire.

The state machines only keep deadlines (`Timer`, with an injected clock); this
loop is the one place that waits for them on the event loop, woken early when
an earlier deadline is scheduled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from klamm.coordinator.timer import Timer


async def run_timers(timer: Timer, wake: asyncio.Event, fire: Callable[[], None]) -> None:
    """Call `fire` whenever a deadline of `timer` may have passed; runs until cancelled."""
    while True:
        deadline = timer.next_deadline()
        wake.clear()
        if deadline is None or deadline > timer.clock():
            delay = None if deadline is None else (deadline - timer.clock()) / 1000
            try:
                await asyncio.wait_for(wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
        fire()
