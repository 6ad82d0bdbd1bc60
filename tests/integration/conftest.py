"""In-process broker fixtures and a raw-socket Kafka client written with kio.

The broker runs on its own asyncio loop in a background thread, so tests can
talk to it with plain blocking sockets. `RawClient` speaks the wire protocol
directly (request header + body encoded by kio, 4-byte size framing), which
lets bad-input tests send exactly the bytes they want.

Fixtures
  broker_factory  broker_factory(**overrides) -> a started BrokerThread (stopped at teardown)
  broker          a started broker with default config
  client          a RawClient connected to `broker`
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import itertools
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from klamm.broker.broker import Broker
from klamm.config.broker import BrokerConfig
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from tests.conftest import free_port  # noqa: F401  (the integration tests import it from here)

START_TIMEOUT_S = 20.0
IO_TIMEOUT_S = 10.0

# API keys used by the tests
PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = 18, 19, 20, 22


# ------------------------------------------------------------------ broker ---
class BrokerThread:
    """A klamm `Broker` on an asyncio loop in a daemon thread; restartable on the same dirs."""

    def __init__(self, log_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.overrides = dict(overrides or {})
        self.broker: Broker | None = None
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="klamm-test-broker", daemon=True)
        self._thread.start()

    def _config(self) -> BrokerConfig:
        # Restart on the same port, so clients that hold the address keep working.
        props = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(self.log_dir)}
        props.update(self.overrides)
        return BrokerConfig.from_properties(props)

    def run(self, coro: Any, timeout: float = START_TIMEOUT_S) -> Any:
        """Run a coroutine on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, fn: Callable[[], Any], timeout: float = IO_TIMEOUT_S) -> Any:
        """Run a plain function on the broker's loop (broker state is not thread-safe)."""

        async def wrapper() -> Any:
            return fn()

        return self.run(wrapper(), timeout)

    def start(self) -> BrokerThread:
        assert self.broker is None, "already started"
        broker = Broker(self._config())
        self.run(broker.start())
        self.broker = broker
        self.port = broker.port
        return self

    def stop(self) -> None:
        if self.broker is not None:
            broker, self.broker = self.broker, None
            self.run(broker.stop())

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    def connect(self, **kwargs: Any) -> RawClient:
        return RawClient(self.port, **kwargs)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    made: list[BrokerThread] = []

    def factory(log_dir: Path | None = None, **overrides: str) -> BrokerThread:
        directory = log_dir or tmp_path / f"data{len(made)}"
        broker = BrokerThread(directory, overrides)
        made.append(broker)
        return broker.start()

    yield factory
    for broker in made:
        broker.close()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory()


@pytest.fixture
def client(broker: BrokerThread) -> Iterator[RawClient]:
    c = broker.connect()
    yield c
    c.close()


# ------------------------------------------------------------- raw client ---
class Disconnected(Exception):
    """The broker closed the connection."""


class RawClient:
    """One blocking socket speaking the Kafka protocol through kio."""

    def __init__(self, port: int, client_id: str | None = "klamm-tests", timeout: float = IO_TIMEOUT_S) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self._correlation = itertools.count(1)
        self._sent: dict[int, tuple[int, int]] = {}

    # encoding
    def encode(self, api_key: int, version: int, body: Any, correlation_id: int) -> bytes:
        """A whole frame: size, request header, body. `body` is a dict or a kio entity."""
        types = message_types(api_key, version)
        header_type = RequestHeaderV2 if types.request_header_version == 2 else RequestHeaderV1
        header = header_type(request_api_key=api_key, request_api_version=version,
                             correlation_id=correlation_id, client_id=self.client_id)
        buffer = io.BytesIO()
        entity_writer(header_type)(buffer, header)
        entity_writer(types.request)(buffer, build(types.request, body))
        payload = buffer.getvalue()
        return struct.pack(">i", len(payload)) + payload

    # sending
    def send(self, api_key: int, version: int, body: Any, correlation_id: int | None = None) -> int:
        correlation_id = next(self._correlation) if correlation_id is None else correlation_id
        self.send_raw(self.encode(api_key, version, body, correlation_id))
        self._sent[correlation_id] = (api_key, version)
        return correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    # receiving
    def _read_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            try:
                chunk = self.sock.recv(n - len(chunks))
            except ConnectionResetError as exc:
                raise Disconnected(str(exc)) from exc
            if not chunk:
                raise Disconnected(f"connection closed after {len(chunks)} of {n} bytes")
            chunks += chunk
        return bytes(chunks)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def receive(self, api_key: int | None = None, version: int | None = None) -> tuple[int, Any]:
        """(correlation id, decoded response body) of the next response frame."""
        frame = self.read_frame()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        if api_key is None:
            api_key, version = self._sent[correlation_id]
        assert version is not None
        types = message_types(api_key, version)
        if types.response_header_version == 1:
            _, position = entity_reader(ResponseHeaderV1)(frame, 0)
        else:
            position = 4
        # kio readers return (entity, bytes consumed from the offset).
        body, consumed = entity_reader(types.response)(frame, position)
        trailing = len(frame) - position - consumed
        assert trailing == 0, f"{trailing} trailing bytes in the response"
        self._sent.pop(correlation_id, None)
        return correlation_id, body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        correlation_id = self.send(api_key, version, body)
        got, response = self.receive(api_key, version)
        assert got == correlation_id
        return response

    def expect_disconnect(self, timeout: float = IO_TIMEOUT_S) -> None:
        """Wait for the broker to close this connection (EOF or reset), with no response before it."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return
        except socket.timeout:
            pytest.fail(f"broker kept the connection open for {timeout}s")
        assert data == b"", f"expected a disconnect, got {len(data)} bytes: {data[:64]!r}"

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------ conveniences ---
def metadata_request(version: int = 12, topics: list[str] | None = None, auto_create: bool = False) -> Any:
    """A Metadata request; topics None asks for all topics (a null array, which build() cannot express)."""
    types = message_types(METADATA, version)
    body: dict[str, Any] = {"allow_auto_topic_creation": auto_create, "include_topic_authorized_operations": False,
                            "topics": [{"name": name, "topic_id": uuid.UUID(int=0)} for name in topics or []]}
    request = build(types.request, body)
    return request if topics is not None else dataclasses.replace(request, topics=None)


def topic_names(client: RawClient) -> set[str]:
    return {t.name for t in client.request(METADATA, 12, metadata_request()).topics}


def create_topic(client: RawClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                 version: int = 7) -> Any:
    """Create a topic and assert it worked; returns the CreateTopics topic result."""
    response = client.request(CREATE_TOPICS, version, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 10_000,
    })
    [result] = response.topics
    assert result.error_code == 0, (result.error_code, result.error_message)
    return result


def produce(client: RawClient, topic: str, records: bytes | None, partition: int = 0, acks: int = -1,
            version: int = 9) -> Any:
    """One Produce of `records` to one partition; returns that partition's response."""
    response = client.request(PRODUCE, version, {
        "acks": acks, "timeout": 10_000, "transactional_id": None,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    })
    [topic_response] = response.responses
    assert topic_response.name == topic
    [partition_response] = topic_response.partition_responses
    assert partition_response.index == partition
    return partition_response


def fetch_body(topic: str | uuid.UUID, offset: int, partition: int = 0, max_wait_ms: int = 0, min_bytes: int = 1,
               max_bytes: int = 1 << 20) -> dict[str, Any]:
    key = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"topic": topic}
    return {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{**key, "partitions": [{"partition": partition, "fetch_offset": offset,
                                           "current_leader_epoch": -1, "log_start_offset": -1,
                                           "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }


def fetch(client: RawClient, topic: str | uuid.UUID, offset: int, partition: int = 0, version: int = 11,
          **kwargs: Any) -> Any:
    """One Fetch of one partition; returns that partition's response."""
    response = client.request(FETCH, version, fetch_body(topic, offset, partition, **kwargs))
    assert response.error_code == 0
    [topic_response] = response.responses
    [partition_response] = topic_response.partitions
    return partition_response


def wait_for(condition: Callable[[], Any], timeout: float = IO_TIMEOUT_S, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout}s")
        time.sleep(interval)


CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def two_node_configs(common: dict[str, str] | None = None, node1: dict[str, str] | None = None
                     ) -> dict[int, dict[str, str]]:
    """Node 1 broker and controller (its CONTROLLER listener on a port of its own), node 2 broker-only: the
    configs for `formatted_cluster`, with `common` settings for both and `node1`'s own."""
    controller_port = free_port()
    shared = {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}", "controller.listener.names": "CONTROLLER",
              "broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000",
              "offsets.topic.num.partitions": "1", **(common or {})}
    return {1: {**shared, "node.id": "1", "process.roles": "broker,controller",
                "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", **(node1 or {})},
            2: {**shared, "node.id": "2", "process.roles": "broker"}}


@pytest.fixture
def formatted_cluster(tmp_path: Path) -> Iterator[Callable[..., list[BrokerThread]]]:
    """start(configs, *add_scram): each node's config (node id -> properties) formatted with `klamm storage
    format` (the cluster id above, --add-scram arguments) and started in order; all closed at the end."""
    from klamm.cli.main import main

    made: list[BrokerThread] = []

    def start(configs: dict[int, dict[str, str]], *add_scram: str) -> list[BrokerThread]:
        scram = [a for argument in add_scram for a in ("--add-scram", argument)]
        for node_id, config in configs.items():
            log_dir = tmp_path / f"node{node_id}"
            properties = tmp_path / f"node{node_id}.properties"
            properties.write_text("".join(f"{k}={v}\n" for k, v in {**config, "log.dirs": str(log_dir)}.items()))
            with contextlib.redirect_stdout(io.StringIO()):
                assert main(["storage", "format", "--cluster-id", CLUSTER_ID, "--config", str(properties), *scram]) == 0
            node = BrokerThread(log_dir, config)
            made.append(node)
            node.start()
        return made

    yield start
    for node in reversed(made):
        node.close()
