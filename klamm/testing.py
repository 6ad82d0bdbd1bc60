"""klamm in your test suite: a real broker in the test process, on a free port, in a temporary directory.

    async with klamm.testing.broker() as b:        # on the running event loop
        producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap_servers)

    with klamm.testing.run_broker() as b:          # sync code: its own loop in a thread
        Producer({"bootstrap.servers": b.bootstrap_servers})

Overrides are broker configs, by Kafka name through `properties=` or as keyword
arguments with underscores (`num_partitions=3` is `num.partitions=3`); values
may be strings or Python values. Unless overridden, groups rebalance at once
(group.initial.rebalance.delay.ms=0) and __consumer_offsets has one partition,
so group tests do not wait; the data directory is removed afterwards.
The pytest fixture `klamm_broker` (klamm.pytest_plugin) wraps `run_broker`.

    with klamm.testing.run_cluster(3) as c:        # three brokers replicating, in this process
        Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
        c.call(c.kill_broker(2))                   # as kill -9 then the controller's session timeout

The brokers of a cluster share one in-process controller (the networked
controller is the `process.roles` start-up); each has its own log directory and
port, and replicates over loopback like a real cluster.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from klamm.broker.broker import Broker
from klamm.controller.controller import Controller
from klamm.controller.metadata_log import InMemoryMetadataLog
from klamm.config.broker import BrokerConfig
from klamm.config.broker_keys import BROKER_CONFIG_DEF

__all__ = ["EmbeddedBroker", "EmbeddedCluster", "broker", "config_for", "inprocess_cluster", "run_broker",
           "run_cluster"]

# Fast defaults for tests; each can be overridden.
TEST_DEFAULTS: dict[str, Any] = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 1,
}


@dataclass
class EmbeddedBroker:
    """A running in-process broker as a test sees it."""

    broker: Broker
    log_dir: str
    loop: asyncio.AbstractEventLoop

    @property
    def port(self) -> int:
        return self.broker.port

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    @property
    def metrics_url(self) -> str | None:
        """http://127.0.0.1:port/metrics when started with metrics_port=0 (or another port), else None."""
        port = self.broker.metrics_port
        return None if port is None else f"http://127.0.0.1:{port}/metrics"


def config_for(log_dir: str, properties: Mapping[str, Any] | None = None, **overrides: Any) -> BrokerConfig:
    """The configuration of a test broker: loopback, ephemeral port, `log_dir`, then the overrides."""
    props: dict[str, Any] = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": log_dir, **TEST_DEFAULTS}
    props.update(properties or {})
    props.update({_kafka_name(key): value for key, value in overrides.items()})
    return BrokerConfig.from_properties(props)


def _kafka_name(attr: str) -> str:
    """num_partitions -> num.partitions (a Kafka name works as is, e.g. through **{'num.partitions': 3})."""
    if attr in BROKER_CONFIG_DEF:
        return attr
    for key in BROKER_CONFIG_DEF:
        if key.attr == attr:
            return key.name
    raise TypeError(f"unknown broker config {attr!r}")


@asynccontextmanager
async def broker(properties: Mapping[str, Any] | None = None, **overrides: Any) -> AsyncIterator[EmbeddedBroker]:
    """Run a broker on the current event loop for the duration of the block."""
    with tempfile.TemporaryDirectory(prefix="klamm-") as log_dir:
        instance = Broker(config_for(log_dir, properties, **overrides))
        await instance.start()
        try:
            yield EmbeddedBroker(instance, log_dir, asyncio.get_running_loop())
        finally:
            await instance.stop()


@contextmanager
def run_broker(properties: Mapping[str, Any] | None = None, **overrides: Any) -> Iterator[EmbeddedBroker]:
    """Run a broker on its own event loop in a background thread, for synchronous or threaded tests."""
    with _in_thread(broker(properties, **overrides), "klamm-broker") as running:
        yield running


@contextmanager
def _in_thread(context: Any, name: str) -> Iterator[Any]:
    """Enter an async context manager on a new event loop in a daemon thread; leave it and close the loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
    thread.start()
    try:
        running = asyncio.run_coroutine_threadsafe(context.__aenter__(), loop).result()
        try:
            yield running
        finally:
            asyncio.run_coroutine_threadsafe(context.__aexit__(None, None, None), loop).result()
    finally:
        asyncio.run_coroutine_threadsafe(_cancel_remaining_tasks(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@dataclass
class EmbeddedCluster:
    """Brokers 1..n sharing one controller, as a test sees them."""

    controller: Controller
    brokers: dict[int, Broker]  # the running ones
    log_dirs: dict[int, str]
    configs: dict[int, BrokerConfig]
    loop: asyncio.AbstractEventLoop

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values())

    def call(self, coroutine: Any, timeout: float = 60) -> Any:
        """Run a coroutine on the cluster's loop from another thread (run_cluster)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def partition(self, topic: str, index: int = 0) -> Any:
        """The partition as the controller's image has it (leader, ISR, epochs)."""
        return self.controller.image.topics_by_name[topic].partitions[index]

    async def stop_broker(self, node_id: int, *, fence: bool = True) -> None:
        """Stop a broker as SIGTERM does (its leaderships move first); with `fence` the controller then
        fences it, as its session timeout would."""
        broker = self.brokers.pop(node_id)
        await broker.stop()
        if fence:
            self.controller.fence_broker(node_id)

    async def kill_broker(self, node_id: int, *, fence: bool = True) -> None:
        """Stop a broker as kill -9 would: no controlled shutdown, it still leads and is in the ISR until
        the controller fences it (with `fence`, at once, as its session timeout would)."""
        broker = self.brokers.pop(node_id)
        await broker.stop(controlled=False)
        if fence:
            self.controller.fence_broker(node_id)

    async def start_broker(self, node_id: int) -> Broker:
        """Start a broker again, on its log directory and port."""
        instance = Broker(self.configs[node_id], controller=self.controller)
        await instance.start()
        self.brokers[node_id] = instance
        return instance


@asynccontextmanager
async def inprocess_cluster(size: int = 3, properties: Mapping[str, Any] | None = None,
                            node_properties: Mapping[int, Mapping[str, Any]] | None = None,
                            **overrides: Any) -> AsyncIterator[EmbeddedCluster]:
    """Run `size` replicating brokers on the current event loop for the duration of the block; a node's
    `node_properties` (by node id: its broker.rack, say) go over the common `properties`."""
    with tempfile.TemporaryDirectory(prefix="klamm-cluster-") as root:
        controller = Controller(InMemoryMetadataLog(), 1)
        controller.load()
        cluster = EmbeddedCluster(controller, {}, {}, {}, asyncio.get_running_loop())
        try:
            for node_id in range(1, size + 1):
                log_dir = f"{root}/broker-{node_id}"
                own = {**(properties or {}), **(node_properties or {}).get(node_id, {})}
                config = config_for(log_dir, own, node_id=node_id, **overrides)
                cluster.log_dirs[node_id] = log_dir
                instance = Broker(config, controller=controller)
                await instance.start()
                # a restart keeps its port, so the clients' bootstrap list stays right
                bound = ",".join(f"{name}://{host or '127.0.0.1'}:{instance.listener_ports[name]}"
                                 for name, host, _ in instance.client_listeners)
                cluster.configs[node_id] = config_for(log_dir, {**own, "listeners": bound},
                                                      node_id=node_id, **overrides)
                cluster.brokers[node_id] = instance
            yield cluster
        finally:
            for instance in list(cluster.brokers.values()):
                await instance.stop()
            controller.close()


@contextmanager
def run_cluster(size: int = 3, properties: Mapping[str, Any] | None = None,
                node_properties: Mapping[int, Mapping[str, Any]] | None = None,
                **overrides: Any) -> Iterator[EmbeddedCluster]:
    """`inprocess_cluster` on its own event loop in a background thread, for synchronous tests."""
    with _in_thread(inprocess_cluster(size, properties, node_properties, **overrides), "klamm-cluster") as running:
        yield running


async def _cancel_remaining_tasks() -> None:
    """Finish what the stopped broker left on the loop (connection writers and the like) before it closes."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
