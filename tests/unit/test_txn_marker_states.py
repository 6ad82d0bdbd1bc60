"""The transaction coordinator's record of its markers under way does not outlive its coordinating the id.

A marker's state is keyed by transactional id, producer id and epoch, topic and
partition; a producer runs many transactions in one epoch. A state left behind
when the id's partition of __transaction_state moves away would answer for the
same producer's next transaction, should this broker coordinate the id again:
its marker taken as written, or as under way, without being written.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from klamm.coordinator.transactions.runtime import TransactionCoordinatorRuntime
from klamm.protocol.errors import ErrorCode

KEY = ("tid", 7, 0, "t", 0)  # (transactional id, producer id, producer epoch, topic, partition)


@pytest.mark.parametrize("answered", ["before the move", "after the move"])
def test_a_markers_state_goes_when_its_transactional_id_moves_away(answered: str) -> None:
    async def scenario() -> dict[tuple, str]:
        runtime = TransactionCoordinatorRuntime(SimpleNamespace(node_id=1))
        runtime.coordinator = SimpleNamespace(unload=lambda index: ["tid"])  # "tid" lives in partition 0
        answer: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        runtime._await_marker(KEY, lambda: answer)
        if answered == "before the move":
            answer.set_result(ErrorCode.none)
            await asyncio.sleep(0.01)
            assert runtime._markers == {KEY: "written"}
        runtime._unload(0)
        if answered == "after the move":
            answer.set_result(ErrorCode.none)
            await asyncio.sleep(0.01)
        return runtime._markers

    assert asyncio.run(scenario()) == {}
