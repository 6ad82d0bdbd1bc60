"""klamm.testing: in-process brokers for test suites, and the klamm_broker pytest fixture."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

import klamm.testing
from klamm.testing import config_for, run_broker

ROOT = Path(__file__).resolve().parents[2]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(15) == 0


def consume(bootstrap: str, topic: str, count: int, timeout: float = 20) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_sync_broker_starts_fast_and_serves_confluent_kafka():
    started = time.perf_counter()
    with run_broker() as b:
        elapsed = time.perf_counter() - started
        print(f"klamm.testing.run_broker started in {elapsed * 1000:.0f} ms")
        assert elapsed < 3.0  # typically well under 0.2 s; generous for a loaded CI machine
        assert b.bootstrap_servers == f"127.0.0.1:{b.port}" and b.port > 0
        values = [b"value-%d" % i for i in range(25)]
        produce(b.bootstrap_servers, "roundtrip", values)
        assert consume(b.bootstrap_servers, "roundtrip", len(values)) == values


def test_log_dir_is_temporary_and_removed():
    with run_broker() as b:
        log_dir = Path(b.log_dir)
        assert log_dir.is_dir()
    assert not log_dir.exists()


def test_overrides_by_python_name_and_by_kafka_name():
    config = config_for("/tmp/x", {"log.retention.ms": 1234}, num_partitions=3, **{"auto.create.topics.enable": "false"})
    assert config.num_partitions == 3
    assert config.log_retention_ms == 1234
    assert config.auto_create_topics_enable is False
    assert config.group_initial_rebalance_delay_ms == 0  # test default
    with pytest.raises(TypeError, match="no_such_config"):
        config_for("/tmp/x", no_such_config=1)


def test_override_reaches_the_running_broker():
    with run_broker(num_partitions=3) as b:
        produce(b.bootstrap_servers, "three", [b"x"])
        partitions = [key for key in b.broker.replicas.partitions if key[0] == "three"]
        assert len(partitions) == 3


@pytest.mark.asyncio
async def test_two_async_brokers_in_one_process():
    from aiokafka import AIOKafkaProducer

    started = time.perf_counter()
    async with klamm.testing.broker() as first, klamm.testing.broker(metrics_port=0) as second:
        print(f"two brokers started in {(time.perf_counter() - started) * 1000:.0f} ms")
        assert first.port != second.port and first.log_dir != second.log_dir
        assert first.metrics_url is None and second.metrics_url is not None
        for running, count in ((first, 3), (second, 5)):
            producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap_servers)
            await producer.start()
            try:
                for i in range(count):
                    await producer.send_and_wait("t", b"%d" % i)
            finally:
                await producer.stop()
        assert first.broker.replicas.get("t", 0).log_end_offset == 3
        assert second.broker.replicas.get("t", 0).log_end_offset == 5


def test_two_threaded_brokers_at_once():
    with run_broker() as first, run_broker() as second:
        produce(first.bootstrap_servers, "a", [b"1", b"2"])
        produce(second.bootstrap_servers, "a", [b"3"])
        assert consume(first.bootstrap_servers, "a", 2) == [b"1", b"2"]
        assert consume(second.bootstrap_servers, "a", 1) == [b"3"]


def test_pytest_plugin_fixture(tmp_path):
    """The klamm_broker fixture, loaded as the pytest11 entry point would load it."""
    (tmp_path / "test_uses_fixture.py").write_text(textwrap.dedent("""
        import pytest
        from confluent_kafka import Producer

        def test_sync(klamm_broker):
            producer = Producer({"bootstrap.servers": klamm_broker.bootstrap_servers})
            producer.produce("t", value=b"v")
            assert producer.flush(15) == 0
            assert klamm_broker.broker.replicas.get("t", 0).log_end_offset == 1

        @pytest.mark.klamm_broker(num_partitions=2)
        def test_marker(klamm_broker):
            assert klamm_broker.broker.config.num_partitions == 2
    """))
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "klamm.pytest_plugin", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
