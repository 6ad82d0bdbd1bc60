"""A single node makes a coordinator's topic on the first FindCoordinator as a cluster does: through its
controller, the partitions' logs made in the log-creation thread while the loop serves other connections.
Made inline, the 50 partitions of __consumer_offsets held the loop for 50-100 ms inside that request."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from klamm.protocol.errors import ErrorCode
from klamm.protocol.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from klamm.storage.segment import LogSegment

from tests.integration.test_coordinator_failures import FIND_COORDINATOR

PARTITIONS = 5


@pytest.mark.parametrize(("key_type", "topic"), [(0, CONSUMER_OFFSETS), (1, TRANSACTION_STATE)])
def test_the_first_find_coordinator_makes_the_topics_logs_off_the_loop(broker_factory: Any, monkeypatch: Any,
                                                                        key_type: int, topic: str) -> None:
    made: list[tuple[str, str]] = []  # (partition directory, thread) of each segment made
    create = LogSegment.create.__func__  # type: ignore[attr-defined]

    def recorded(cls: type, directory: Path, *args: Any, **kwargs: Any) -> LogSegment:
        made.append((Path(directory).name, threading.current_thread().name))
        return create(cls, directory, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "create", classmethod(recorded))
    broker = broker_factory(**{"offsets.topic.num.partitions": str(PARTITIONS),
                               "transaction.state.log.num.partitions": str(PARTITIONS)})
    found = broker.connect().request(FIND_COORDINATOR, 3, {"key": "k", "key_type": key_type})
    assert (found.error_code, found.node_id) == (ErrorCode.none, broker.broker.node_id)
    threads = [thread for directory, thread in made if directory.startswith(f"{topic}-")]
    assert len(threads) == PARTITIONS
    assert all(thread.startswith("klamm-log-creation") for thread in threads), threads
