"""Serving a request leaves no reference cycle: a request and its answer are freed when the answer is sent.

Garbage in cycles waits for the cyclic collector, and a request in flight during a
young collection is promoted with its decoded body; promoted garbage brings on the
full collections that pause the event loop (BENCHMARKS.md, latency-delete).
"""

from __future__ import annotations

from klamm.protocol.records import build_batch
from tests.cyclic_garbage import cyclic_garbage
from tests.integration.conftest import BrokerThread, RawClient, create_topic, fetch, produce

TOPIC = "garbage"


def test_produce_and_fetch_leave_no_cyclic_garbage(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, TOPIC)
    assert produce(client, TOPIC, build_batch([(None, b"warm")])).error_code == 0
    fetch(client, TOPIC, 0)
    with cyclic_garbage() as left:
        for n in range(100):
            assert produce(client, TOPIC, build_batch([(b"k", b"v%d" % n)])).error_code == 0
            fetch(client, TOPIC, n)
    assert not {"Request", "_Answer", "ProduceRequest", "FetchRequest"} & set(left), left.most_common(10)
