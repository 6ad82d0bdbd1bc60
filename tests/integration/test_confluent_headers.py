"""Header keys that are not UTF-8 read as a Java consumer reads them: the `klamm` Spark source, console-consumer.

confluent-kafka's Message.headers() raises SystemError on such a key and frees the
headers; klamm.spark.reading then reads again from that record with the headers
taken from librdkafka (klamm.confluent_headers). Every record must come once, in
order, with Java's decoding of its keys.
"""

from __future__ import annotations

import confluent_kafka
import pytest

from klamm.protocol.java_utf8 import decode
from klamm.protocol.records import NewRecord, build_batch
from klamm.spark.offsets import OffsetRange
from klamm.cli.tools.console_consumer import Formatter
from klamm.confluent_headers import UnreadableHeaders, headers_of, raw_headers
from klamm.spark.reading import read_range
from tests.integration.conftest import BrokerThread, RawClient, create_topic, produce

TOPIC = "raw-headers"
KEYS = [b"plain", b"k\xff", b"\xe0\x80x", "caf\u00e9".encode(), b"\xed\xa0\x80", b"", b"\xf0\x9f\x98"]


def headers_for(i: int) -> list[tuple[bytes, bytes | None]]:
    return [(KEYS[(i + j) % len(KEYS)], None if j == 2 else b"v%d" % j) for j in range(i % 4)]


def fill(client: RawClient, batches: list[range]) -> list[list[tuple[bytes, bytes | None]]]:
    """Batches of the records numbered in each range, record i with headers_for(i) where i is not 0 mod 5."""
    create_topic(client, TOPIC)
    expected = []
    for numbers in batches:
        records = [NewRecord(b"k%d" % i, b"v%d" % i, headers_for(i) if i % 5 else [], None) for i in numbers]
        assert produce(client, TOPIC, build_batch(records)).error_code == 0
        expected += [list(r.headers) for r in records]
    return expected


def read(broker: BrokerThread, end: int, start: int = 0) -> list[dict]:
    kafka = {"bootstrap.servers": f"127.0.0.1:{broker.port}"}
    batches = read_range(kafka, OffsetRange(TOPIC, 0, start, end), include_headers=True, fail_on_data_loss=True,
                         poll_timeout_s=30)
    return [row for batch in batches for row in batch.to_pylist()]


def consume(broker: BrokerThread, count: int) -> list[confluent_kafka.Message]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": "g"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        messages: list[confluent_kafka.Message] = []
        while len(messages) < count:
            messages += [m for m in consumer.consume(count, timeout=10) if m.error() is None]
        return messages
    finally:
        consumer.close()


@pytest.mark.parametrize("batches", [
    [range(0, 40)],  # the first bad key inside one fetched batch
    [range(0, 1), range(1, 2), range(2, 30), range(30, 31), range(31, 60)],  # and across batches
])
def test_keys_that_are_not_utf8_read_as_java_reads_them(broker: BrokerThread, client: RawClient,
                                                        batches: list[range]) -> None:
    expected = fill(client, batches)
    rows = read(broker, len(expected))
    assert [row["offset"] for row in rows] == list(range(len(expected)))
    assert [row["value"] for row in rows] == [b"v%d" % i for i in range(len(expected))]
    assert [[(h["key"], h["value"]) for h in row["headers"]] for row in rows] == [
        [(decode(k), v) for k, v in headers] for headers in expected]
    assert any("\ufffd" in h["key"] for row in rows for h in row["headers"])


def test_a_range_starting_after_the_bad_keys_and_one_ending_on_one(broker: BrokerThread, client: RawClient) -> None:
    expected = fill(client, [range(0, 20)])
    for start, end in [(7, 20), (0, 2), (1, 2)]:
        rows = read(broker, end, start)
        assert [row["offset"] for row in rows] == list(range(start, end))
        assert [[(h["key"], h["value"]) for h in row["headers"]] for row in rows] == [
            [(decode(k), v) for k, v in headers] for headers in expected[start:end]]


def test_a_message_whose_headers_were_taken_is_refused_not_misread(broker: BrokerThread, client: RawClient) -> None:
    fill(client, [range(0, 20)])
    messages = consume(broker, 20)
    assert raw_headers(messages[3]) == [(decode(k), v) for k, v in headers_for(3)]
    assert raw_headers(messages[0]) == []
    assert messages[17].headers() == [("caf\u00e9", b"v0")]  # UTF-8: decoded, and the raw headers freed
    with pytest.raises(UnreadableHeaders):
        raw_headers(messages[17])
    with pytest.raises(UnreadableHeaders):
        raw_headers(object())


def test_headers_of_any_message(broker: BrokerThread, client: RawClient) -> None:
    fill(client, [range(0, 20)])
    messages = consume(broker, 20)
    assert [headers_of(m) for m in messages] == [
        [(decode(k), v) for k, v in (headers_for(i) if i % 5 else [])] for i in range(20)]
    assert messages[17].headers() == headers_of(messages[17])  # asked before: confluent-kafka's own list


def test_the_console_consumer_prints_them_as_kafkas_does(broker: BrokerThread, client: RawClient) -> None:
    fill(client, [range(0, 20)])
    formatter = Formatter.from_properties({"print.headers": "true", "print.value": "false"})
    lines = [formatter.format(m) for m in consume(broker, 20)]
    assert lines[:4] == [b"NO_HEADERS\n", "k\ufffd:v0\n".encode(), "\ufffd\ufffdx:v0,caf\u00e9:v1\n".encode(),
                         "caf\u00e9:v0,\ufffd:v1,:null\n".encode()]
