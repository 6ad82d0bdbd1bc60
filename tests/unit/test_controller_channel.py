"""A broker's requests to the controller give up on a voter as soon as it turns to another.

A voter cut off from the network accepts a connection (or keeps the one it had)
and never answers. Requests in flight to it, and those queued behind them on
the same connection, must not wait out their timeout once the broker has
learned (from a fetch, or from its own Raft node) that another voter leads.
"""

from __future__ import annotations

import asyncio
import io
import logging
import socket
import time

import pytest
from kio.serial import entity_writer

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.broker.controller_channel import ControllerLocator, QuorumConnection
from klamm.broker.metadata_follower import MetadataFollower
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.errors import ErrorCode
from tests.unit.test_broker_client_frames import FETCH, REQUEST, VERSION, ScriptedServer, fetch_response_body, whole

LONG_S = 30.0  # a try's own timeout: the tests fail if any request waits for it


class SilentServer:
    """Accepts connections and reads what is sent; never answers."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        while await reader.read(65536):
            pass
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


async def _outcome(request: asyncio.Future) -> tuple[str, float]:
    start = time.monotonic()
    try:
        await request
        return "answered", time.monotonic() - start
    except BrokerUnavailable as exc:
        return str(exc), time.monotonic() - start


def test_a_reset_fails_the_request_in_flight_and_those_waiting_their_turn_then_reconnects() -> None:
    async def scenario() -> None:
        silent = SilentServer()
        port = await silent.start()
        connection = BrokerConnection("127.0.0.1", port, "test", timeout_s=LONG_S)
        try:
            first = asyncio.ensure_future(connection.request(FETCH, VERSION, REQUEST))
            queued = asyncio.ensure_future(connection.request(FETCH, VERSION, REQUEST))
            await asyncio.sleep(0.2)
            assert not first.done() and not queued.done()
            connection.reset()
            outcomes = await asyncio.wait_for(asyncio.gather(_outcome(first), _outcome(queued)), 5)
            for reason, _ in outcomes:
                assert "given up" in reason
            later = asyncio.ensure_future(connection.request(FETCH, VERSION, REQUEST, timeout_s=0.3))
            reason, _ = await _outcome(later)
            assert "TimeoutError" in reason  # tried again on a new connection, not given up
            assert silent.connections == 2
        finally:
            connection.close()
            await silent.stop()
    asyncio.run(scenario())


def test_a_reset_while_idle_leaves_the_next_request_to_connect_anew() -> None:
    async def scenario() -> None:
        server = ScriptedServer([(fetch_response_body(b"a"), whole), (fetch_response_body(b"b"), whole)])
        port = await server.start()
        connection = BrokerConnection("127.0.0.1", port, "test", timeout_s=LONG_S)
        try:
            await connection.request(FETCH, VERSION, REQUEST)
            connection.reset()
            response = await connection.request(FETCH, VERSION, REQUEST)
            assert bytes(response.responses[0].partitions[0].records) == b"b"
        finally:
            connection.close()
            await server.stop()
    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["learn", "failed"])
def test_turning_to_another_voter_gives_up_every_request_to_the_previous_one(how: str) -> None:
    """Writes queued on one client's connection and a heartbeat on another's: all tried at the new leader at once."""
    async def scenario() -> None:
        silent = SilentServer()
        cut_port = await silent.start()
        leader = ScriptedServer([(fetch_response_body(b"x"), whole)] * 3)
        leader_port = await leader.start()
        locator = ControllerLocator({1: ("127.0.0.1", cut_port), 2: ("127.0.0.1", leader_port)})
        writes, heartbeats = (QuorumConnection(locator, "test", LONG_S) for _ in range(2))
        try:
            stuck = [asyncio.ensure_future(writes.request(FETCH, VERSION, REQUEST)) for _ in range(2)]
            stuck.append(asyncio.ensure_future(heartbeats.request(FETCH, VERSION, REQUEST)))
            await asyncio.sleep(0.2)
            assert not any(r.done() for r in stuck)
            if how == "learn":
                locator.learn(2)  # a fetch answered NOT_LEADER_OR_FOLLOWER naming voter 2, or the node's own Raft
            else:
                locator.failed(1)  # the metadata fetch to voter 1 timed out
            assert locator.leader == 2
            outcomes = await asyncio.wait_for(asyncio.gather(*map(_outcome, stuck)), 5)
            assert all("given up" in reason for reason, _ in outcomes), outcomes
            for client in (writes, writes, heartbeats):  # the retries go to the new leader and are answered
                response = await asyncio.wait_for(client.request(FETCH, VERSION, REQUEST), 5)
                assert bytes(response.responses[0].partitions[0].records) == b"x"
            locator.learn(2)  # the same leader again: nothing given up
            assert len(leader.correlation_ids) == 3
        finally:
            writes.close()
            heartbeats.close()
            await silent.stop()
            await leader.stop()
    asyncio.run(scenario())


def test_a_metadata_fetch_gives_up_on_a_silent_voter_after_the_quorum_request_timeout() -> None:
    """As a KRaft observer: a fetch unanswered for max_wait + controller.quorum.request.timeout.ms goes elsewhere."""
    async def scenario() -> float:
        silent = SilentServer()
        cut_port = await silent.start()
        leader = ScriptedServer([(fetch_response_body(None, high_watermark=0), whole)])
        leader_port = await leader.start()
        locator = ControllerLocator({1: ("127.0.0.1", cut_port), 2: ("127.0.0.1", leader_port)})
        follower = MetadataFollower(4, "cluster", 1, lambda: QuorumConnection(locator, "test", LONG_S),  # type: ignore
                                    max_wait_ms=100, request_timeout_ms=300)
        start = time.monotonic()
        task = asyncio.ensure_future(follower.run())
        try:
            await asyncio.wait_for(follower.caught_up.wait(), 10)
            return time.monotonic() - start
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await silent.stop()
            await leader.stop()
    took = asyncio.run(scenario())
    assert 0.4 <= took < LONG_S / 3, took


def _not_leader_body(leader_id: int) -> bytes:
    types = message_types(FETCH, VERSION)
    response = build(types.response, {"responses": [{"topic": "t", "partitions": [{
        "partition_index": 0, "error_code": ErrorCode.not_leader_or_follower, "high_watermark": -1,
        "current_leader": {"leader_id": leader_id, "leader_epoch": 1}}]}]})
    out = io.BytesIO()
    entity_writer(types.response)(out, response)
    return out.getvalue()


async def _never(writer: asyncio.StreamWriter, frame: bytes) -> None:
    await asyncio.sleep(LONG_S)


def test_a_voter_naming_a_dead_leader_is_no_sign_that_the_controller_is_reachable_again(
        caplog: pytest.LogCaptureFixture) -> None:
    """While the followers still name the killed leader, the broker goes back and forth between them: one line
    says the controller is unreachable, one that it is reachable again once the new leader answers."""
    async def scenario() -> None:
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            dead_port = closed.getsockname()[1]  # nobody listens: connections are refused
        voter = ScriptedServer([(_not_leader_body(1), whole)] * 4 + [(fetch_response_body(None, 0), whole),
                                                                     (fetch_response_body(None, 0), _never)])
        voter_port = await voter.start()
        locator = ControllerLocator({1: ("127.0.0.1", dead_port), 2: ("127.0.0.1", voter_port)})
        follower = MetadataFollower(4, "cluster", 1, lambda: QuorumConnection(locator, "test", LONG_S),  # type: ignore
                                    max_wait_ms=100)
        task = asyncio.ensure_future(follower.run())
        try:
            await asyncio.wait_for(follower.caught_up.wait(), 10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await voter.stop()
        assert len(voter.correlation_ids) == 6
    with caplog.at_level(logging.INFO, logger="klamm.metadata_follower"):
        asyncio.run(scenario())
    said = [r.getMessage() for r in caplog.records if r.name == "klamm.metadata_follower"]
    assert len(said) == 2 and "ConnectionRefusedError" in said[0] and said[1].endswith("reachable again"), said
