"""Down-conversion in bounded pieces (KIP-283): an old consumer fetching a topic of highly compressed
batches gets message sets no larger than what each fetch read, and still reads every record in order."""

from __future__ import annotations

from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

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
