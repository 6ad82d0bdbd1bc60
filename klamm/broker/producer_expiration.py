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
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("klamm.producer_expiration")


def expire_producers(partitions: Iterable[Any], now_ms: int, expiration_ms: int) -> int:
    """One pass over `partitions`; the number of producer entries removed."""
    removed = 0
    for partition in partitions:
        removed += partition.log.producer_state.remove_expired_producers(now_ms, expiration_ms)
        partition.expire_verification_guards(now_ms - expiration_ms)
    return removed


async def expire_producers_periodically(broker: Any) -> None:
    """Runs until cancelled."""
    while True:
        await asyncio.sleep(broker.config.producer_id_expiration_check_interval_ms / 1000)
        try:
            removed = expire_producers(list(broker.replicas.partitions.values()), time.time_ns() // 1_000_000,
                                       broker.config.producer_id_expiration_ms)
        except Exception:  # one bad log must not end expiry for the others
            log.exception("producer id expiration failed")
            continue
        if removed:
            log.info("expired %d producer id(s)", removed)
