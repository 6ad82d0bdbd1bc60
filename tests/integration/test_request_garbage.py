"""Serving a request leaves no reference cycle: a request and its answer are freed when the answer is sent, and a
connection, with what it had in flight, when it closes.

Garbage in cycles waits for the cyclic collector, and a request in flight during a
young collection is promoted with its decoded body; promoted garbage brings on the
full collections that pause the event loop (BENCHMARKS.md, latency-delete). And what
`klamm serve` froze (a long-lived connection: klamm/cli/collector.py) is never
collected if it dies in a cycle.
"""

from __future__ import annotations

from klamm.protocol.records import build_batch
from tests.cyclic_garbage import cyclic_garbage
from tests.integration.conftest import FETCH, BrokerThread, RawClient, create_topic, fetch, fetch_body, produce, \
    wait_for

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


def open_connections(broker: BrokerThread) -> int:
    return broker.call(lambda: sum(len(p.connections) for p in broker.broker._processors))  # type: ignore[union-attr]


def test_connections_closed_with_fetches_parked_leave_no_cyclic_garbage(broker: BrokerThread,
                                                                       client: RawClient) -> None:
    create_topic(client, TOPIC)
    assert produce(client, TOPIC, build_batch([(None, b"warm")])).error_code == 0
    with cyclic_garbage() as left:
        clients = [RawClient(broker.port) for _ in range(5)]
        for other in clients[:3]:  # parked at the log end until they time out: cancelled when their client goes
            other.send(FETCH, 11, fetch_body(TOPIC, 1, max_wait_ms=30_000))
        fetch(clients[3], TOPIC, 0)  # one answered, one idle
        wait_for(lambda: open_connections(broker) == 6)
        for other in clients:
            other.sock.close()
        wait_for(lambda: open_connections(broker) == 1)
    kinds = {"ClientConnection", "_SelectorSocketTransport", "Task", "_Answer", "Request", "FetchRequest"}
    assert not kinds & set(left), left.most_common(10)
