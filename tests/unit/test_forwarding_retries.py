"""A broker-only node's forwarded writes try the controller again after a failed try (a standby voter closes the
connection; a connection from before a controller restart fails at first use), then answer NOT_CONTROLLER."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from klamm.broker import metadata_follower
from klamm.broker.client import BrokerUnavailable
from klamm.broker.metadata_follower import RemoteControllerClient
from klamm.protocol.errors import ErrorCode, KafkaError


class FlakyConnection:
    """Fails its first `failures` requests as a closed connection does, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures, self.tries = failures, 0

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        self.tries += 1
        if self.tries <= self.failures:
            raise BrokerUnavailable("127.0.0.1:1: ConnectionResetError('connection closed by the other broker')")
        return "answer"


def client(connection: FlakyConnection) -> RemoteControllerClient:
    return RemoteControllerClient(lambda: connection, lifecycle=None)  # type: ignore[arg-type,return-value]


def test_a_write_goes_again_after_the_connection_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_follower, "RETRY_S", 0.01)
    connection = FlakyConnection(failures=2)
    assert asyncio.run(client(connection)._request(19, 7, {})) == "answer"
    assert connection.tries == 3


def test_a_controller_out_of_reach_is_not_controller_after_the_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_follower, "RETRY_S", 0.01)
    monkeypatch.setattr(metadata_follower, "FORWARD_RETRY_S", 0.1)
    connection = FlakyConnection(failures=1000)
    with pytest.raises(KafkaError) as raised:
        asyncio.run(client(connection)._request(19, 7, {}))
    assert raised.value.code == ErrorCode.not_controller
    assert 3 <= connection.tries < 20
