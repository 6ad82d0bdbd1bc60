"""Down-conversion in bounded pieces (KIP-283): an old consumer fetching a topic of highly compressed
batches gets message sets no larger than what each fetch read, and still reads every record in order. And a
slice of the loop at a time: other connections are served while a large fetch converts."""

from __future__ import annotations

import select
import struct
import time

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from klamm.protocol.records import NewRecord, build_batch
from tests.integration import conftest as integration
from tests.integration.conftest import RawClient

from .helpers import create_topic

RECORDS, SIZE = 4000, 2048


def test_an_old_consumer_reads_highly_compressed_batches_in_bounded_pieces(broker, topic):
    create_topic(broker.bootstrap, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip", "linger.ms": 200,
                         "batch.size": 1_000_000})
    for i in range(RECORDS):
        producer.produce(topic, value=b"%06d" % i + bytes(SIZE - 6), partition=0)
    assert producer.flush(30) == 0
    # 8 MB as message sets, ~100 KB on disk: each fetch of at most 64 KB stored bytes answers at most 64 KB
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 10), auto_offset_reset="earliest",
                             max_partition_fetch_bytes=65536, fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(topic, 0)])
    got = []
    try:
        while len(got) < RECORDS:
            polled = consumer.poll(timeout_ms=10_000)
            assert polled, f"no progress after {len(got)} records"
            got += [(m.offset, m.value[:6]) for ms in polled.values() for m in ms]
        fetched = consumer.metrics()["consumer-fetch-manager-metrics"]
    finally:
        consumer.close()
    assert got == [(i, b"%06d" % i) for i in range(RECORDS)]
    assert 0 < fetched["fetch-size-max"] <= 65536  # bytes of one partition's message set in a response


@pytest.mark.single_node  # one broker's loop, reached directly: a cluster's partition may lead elsewhere
def test_other_connections_are_answered_while_a_fetch_converts_down(broker, topic):
    """Converting 1 MiB of small records takes tens of milliseconds: the broker converts a slice of its loop at a
    time, and another connection's request is answered before the fetch's answer begins. (A broker process: in
    this one, the broker's thread would hold the GIL through the conversion.)"""
    records = 30_000  # of 10 B values: one batch of about 0.5 MB
    now = int(time.time() * 1000)
    batch = build_batch([NewRecord(None, b"%010d" % i, (), now) for i in range(records)], timestamp_ms=now)
    with RawClient(broker.port) as old, RawClient(broker.port) as other:
        integration.create_topic(old, topic)
        assert integration.produce(old, topic, batch).error_code == 0
        # both encoded first, so that the second follows the first at once
        fetch = old.encode(integration.FETCH, 2, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 4 << 20}]}]},
            1)
        versions = other.encode(integration.API_VERSIONS, 3, {"client_software_name": "t",
                                                              "client_software_version": "1"}, 2)
        old.send_raw(fetch)
        other.send_raw(versions)
        assert struct.unpack_from(">i", other.read_frame())[0] == 2
        readable, _, _ = select.select([old.sock], [], [], 0)
        assert not readable, "the fetch was converted in one go before the other connection was served"
        got, response = old.receive(integration.FETCH, 2)
    assert got == 1
    [partition] = response.responses[0].partitions
    offsets, data = [], partition.records
    while data:  # offset, size, then the message
        offset, size = struct.unpack_from(">qi", data)
        offsets.append(offset)
        data = data[12 + size:]
    # magic-1 messages are larger than the stored records: as many as fit in the bytes read (KIP-283)
    assert offsets == list(range(len(offsets))) and 0 < len(offsets) < records
