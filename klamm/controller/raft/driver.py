"""Runs a RaftNode on the event loop: its clock, its timers, and its messages over the controller listener.

Requests the node sends go to the other voters' controller listeners over
klamm's broker connections (one request in flight per voter, as the node asks);
their answers go back into the node. Requests that arrive on this node's
controller listener are handed to the node, and the handler awaits the answer
(at once, or when a parked fetch completes). After every step the
`on_step` callback runs, where the controller replays what became committed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity
from klamm.controller.raft.messages import Envelope, FetchRequest, Request, Response
from klamm.controller.raft.node import RaftConfig, RaftNode
from klamm.controller.raft.wire import request_body, response_message
from klamm.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = ["RaftDriver", "raft_config"]


def raft_config(config: Any) -> RaftConfig:
    """The controller.quorum.* settings of a BrokerConfig."""
    return RaftConfig(election_timeout_ms=config.controller_quorum_election_timeout_ms,
                      fetch_timeout_ms=config.controller_quorum_fetch_timeout_ms,
                      election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
                      request_timeout_ms=config.controller_quorum_request_timeout_ms,
                      retry_backoff_ms=config.controller_quorum_retry_backoff_ms,
                      append_linger_ms=config.controller_quorum_append_linger_ms)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class RaftDriver:
    def __init__(self, node: RaftNode, cluster_id: str, voters: Mapping[int, tuple[str, int]], *,
                 on_step: Callable[[], None] = lambda: None, security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.node = node
        self.cluster_id = cluster_id
        timeout_s = node.config.request_timeout_ms / 1000
        self._connections = {voter: BrokerConnection(host, port, f"klamm-controller-{node.node_id}", timeout_s,
                                                     security)
                             for voter, (host, port) in voters.items() if voter != node.node_id}
        self.on_step = on_step
        self._wake = asyncio.Event()
        self._answers: dict[int, asyncio.Future[Response]] = {}
        self._correlation = itertools.count(1)
        self._sends: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.committed = asyncio.Condition()  # notified whenever the node took a step

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Resign gracefully (EndQuorumEpoch), give it a moment to leave, then stop."""
        if self._task is None:
            return
        self.node.resign(now_ms())
        self._step()
        if self._sends:
            await asyncio.wait(list(self._sends), timeout=0.5)
        stopping = [self._task, *self._sends]
        self._task = None
        for task in stopping:
            task.cancel()
        # awaited: a task still cancelling when its loop closes is destroyed pending (asyncio logs an error)
        await asyncio.gather(*stopping, return_exceptions=True)
        for connection in self._connections.values():
            connection.close()
        for answer in self._answers.values():
            if not answer.done():
                answer.cancel()

    async def _run(self) -> None:
        # Until stop() takes the task away. Not asyncio.wait_for: on 3.11 it returns instead of raising when the
        # cancellation meets the wake-up that stop()'s own step sets, and the loop then went on for ever.
        while self._task is not None:
            self.node.tick(now_ms())
            self._step()
            delay = max(0, self.node.next_deadline_ms() - now_ms()) / 1000
            self._wake.clear()
            try:
                async with asyncio.timeout(min(delay, 1.0)):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _step(self) -> None:
        """Send what the node wrote, answer waiting handlers, and let the controller follow."""
        for envelope in self.node.take_outbox():
            if envelope.is_request:
                task = asyncio.ensure_future(self._send(envelope))
                self._sends.add(task)
                task.add_done_callback(self._sends.discard)
            else:
                answer = self._answers.pop(envelope.correlation_id, None)
                if answer is not None and not answer.done():
                    answer.set_result(envelope.body)  # type: ignore[arg-type]
        try:
            self.on_step()
        except Exception:  # the quorum goes on; the controller logs and retries at the next step
            log.exception("the controller failed to follow the quorum")
        self._wake.set()
        asyncio.ensure_future(self._notify())

    async def _notify(self) -> None:
        async with self.committed:
            self.committed.notify_all()

    async def _send(self, envelope: Envelope) -> None:
        connection = self._connections.get(envelope.destination)
        if connection is None:
            return
        api_key, version, body = request_body(envelope.body, self.cluster_id, envelope.destination)  # type: ignore
        timeout_s = self.node.config.request_timeout_ms / 1000
        if isinstance(envelope.body, FetchRequest):
            timeout_s += envelope.body.max_wait_ms / 1000
        try:
            response = await connection.request(api_key, version, body, timeout_s)
        except BrokerUnavailable as exc:
            log.debug("node %d: %s to %d: %s", self.node.node_id, type(envelope.body).__name__,
                      envelope.destination, exc)
            return  # the node times the request out and retries
        message = response_message(api_key, response)
        self.node.handle(Envelope(envelope.destination, self.node.node_id, envelope.correlation_id, message),
                         now_ms())
        self._step()

    async def handle_request(self, source: int, request: Request) -> Response:
        """The node's answer to a request from `source` (awaits a parked fetch)."""
        correlation = next(self._correlation)
        answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._answers[correlation] = answer
        self.node.handle(Envelope(source, self.node.node_id, correlation, request), now_ms())
        self._step()
        return await answer

    def append(self, records: Sequence[bytes]) -> int:
        """Append as leader (KafkaError NOT_CONTROLLER otherwise); the last offset."""
        try:
            last = self.node.append(records, now_ms())
        except KafkaError as exc:
            raise KafkaError(ErrorCode.not_controller, str(exc)) from None
        self._step()
        return last

    async def wait_committed(self, offset: int, epoch: int, timeout_s: float) -> None:
        """Until the high watermark passes `offset` in `epoch`; NOT_CONTROLLER if leadership or time runs out."""
        async def committed() -> None:
            async with self.committed:
                await self.committed.wait_for(
                    lambda: self.node.high_watermark > offset or self.node.epoch != epoch or not self.node.is_leader)
        try:
            await asyncio.wait_for(committed(), timeout_s)
        except TimeoutError:
            raise KafkaError(ErrorCode.not_controller, "the metadata change was not committed in time") from None
        if self.node.epoch != epoch or self.node.high_watermark <= offset:
            raise KafkaError(ErrorCode.not_controller, "leadership moved before the metadata change was committed")
