"""The state of one transactional id (Kafka's TransactionMetadata and TransactionState)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace


class TxnState(enum.Enum):
    """States with Kafka's names and the ids its TransactionLogValue stores."""

    EMPTY = ("Empty", 0)
    ONGOING = ("Ongoing", 1)
    PREPARE_COMMIT = ("PrepareCommit", 2)
    PREPARE_ABORT = ("PrepareAbort", 3)
    COMPLETE_COMMIT = ("CompleteCommit", 4)
    COMPLETE_ABORT = ("CompleteAbort", 5)
    DEAD = ("Dead", 6)
    PREPARE_EPOCH_FENCE = ("PrepareEpochFence", 7)

    @property
    def display(self) -> str:
        return self.value[0]

    @property
    def id(self) -> int:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state {state_id}")

    @classmethod
    def from_display(cls, name: str) -> TxnState | None:
        return next((state for state in cls if state.display == name), None)


PREPARE_STATES = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETE_STATES = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


@dataclass(frozen=True)
class TxnMetadata:
    """What one TransactionLogValue record says; `last_producer_epoch` is kept in memory only
    (the epoch before the coordinator bumped it to fence or abort, for KIP-360 retries)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    start_ms: int = -1
    update_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    last_producer_epoch: int = -1

    def but(self, **changes: object) -> TxnMetadata:
        return replace(self, **changes)  # type: ignore[arg-type]
