"""Producer ids expire: every producer.id.expiration.check.interval.ms, each hosted partition forgets
the producers idle for producer.id.expiration.ms with no open transaction (Kafka's
PeriodicProducerExpirationCheck / ProducerStateManager.removeExpiredProducers), and the
transaction verification guards as old.

Both settings are read on every pass, so a dynamic change of producer.id.expiration.ms applies
at the next check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from klamm.steps import Steps, each_value, in_slices

log = logging.getLogger("klamm.producer_expiration")

# A pass looks at PARTITIONS_A_STEP partitions a step (about 2 us each), SLICE_S of the loop's time a turn: a
# broker of thousands of partitions held the loop for milliseconds.
PARTITIONS_A_STEP = 32
SLICE_S = 0.0005


def expire_producers(hosted: Mapping[tuple[str, int], Any], now_ms: int, expiration_ms: int) -> Steps[int]:
    """One pass over the `hosted` partitions, in steps; the number of producer entries removed. A partition gone
    between two steps is left out, one replaced is taken as it is."""
    removed = 0

    def expire(partition: Any) -> None:
        nonlocal removed
        removed += partition.log.producer_state.remove_expired_producers(now_ms, expiration_ms)
        partition.expire_verification_guards(now_ms - expiration_ms)

    yield from each_value(hosted, PARTITIONS_A_STEP, expire)
    return removed


async def expire_producers_periodically(broker: Any) -> None:
    """Runs until cancelled."""
    while True:
        await asyncio.sleep(broker.config.producer_id_expiration_check_interval_ms / 1000)
        try:
            removed = await in_slices(expire_producers(broker.replicas.partitions, time.time_ns() // 1_000_000,
                                                       broker.config.producer_id_expiration_ms), SLICE_S)
        except Exception:  # one bad log must not end expiry for the others
            log.exception("producer id expiration failed")
            continue
        if removed:
            log.info("expired %d producer id(s)", removed)
