"""Incremental fetch sessions (KIP-227) on the wire."""

from __future__ import annotations

from typing import Any

import pytest

from klamm.protocol.records import build_batch
from tests.integration.conftest import FETCH, BrokerThread, RawClient, create_topic, fetch_body, produce

pytestmark = pytest.mark.timeout(60)
VERSION = 12


def _fetch(client: RawClient, body: dict[str, Any]) -> Any:
    return client.request(FETCH, VERSION, body)


def _two_partitions(topic: str, offsets: tuple[int, int], session_id: int, epoch: int) -> dict[str, Any]:
    body = fetch_body(topic, 0)
    body["session_id"], body["session_epoch"] = session_id, epoch
    body["topics"] = [{"topic": topic, "partitions": [
        {"partition": p, "fetch_offset": offsets[p], "current_leader_epoch": -1, "log_start_offset": -1,
         "partition_max_bytes": 1 << 20} for p in (0, 1)]}]
    return body


def _partitions(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def test_session_sends_only_changes(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "s", partitions=2)
    produce(client, "s", build_batch([(b"k", b"a")]), partition=0)

    full = _fetch(client, _two_partitions("s", (0, 0), session_id=0, epoch=0))
    assert full.error_code == 0 and full.session_id > 0
    assert set(_partitions(full)) == {0, 1}  # a full fetch answers every partition
    session = full.session_id

    # Nothing new, positions moved by the client: partition 0 now at 1, partition 1 unchanged.
    body = _two_partitions("s", (1, 0), session, 1)
    body["topics"][0]["partitions"] = body["topics"][0]["partitions"][:1]  # only what changed
    quiet = _fetch(client, body)
    assert quiet.error_code == 0 and quiet.session_id == session
    assert _partitions(quiet) == {}

    produce(client, "s", build_batch([(b"k", b"b")]), partition=1)
    body = _two_partitions("s", (1, 0), session, 2)
    body["topics"] = []  # nothing changed on the client: the session remembers both positions
    news = _fetch(client, body)
    assert set(_partitions(news)) == {1}
    assert _partitions(news)[1].high_watermark == 1 and len(_partitions(news)[1].records) > 0


def test_forgotten_partitions_leave_the_session(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "f", partitions=2)
    session = _fetch(client, _two_partitions("f", (0, 0), 0, 0)).session_id
    body = _two_partitions("f", (0, 0), session, 1)
    body["topics"] = []
    body["forgotten_topics_data"] = [{"topic": "f", "partitions": [1]}]
    assert _partitions(_fetch(client, body)) == {}
    produce(client, "f", build_batch([(b"k", b"v")]), partition=1)
    body = _two_partitions("f", (0, 0), session, 2)
    body["topics"] = []
    assert _partitions(_fetch(client, body)) == {}  # partition 1 is no longer watched


def test_session_errors(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "e", partitions=2)
    unknown = _fetch(client, _two_partitions("e", (0, 0), 12345, 1))
    assert unknown.error_code == 70  # FETCH_SESSION_ID_NOT_FOUND
    session = _fetch(client, _two_partitions("e", (0, 0), 0, 0)).session_id
    stale = _fetch(client, _two_partitions("e", (0, 0), session, 5))
    assert stale.error_code == 71  # INVALID_FETCH_SESSION_EPOCH
    closing = _fetch(client, _two_partitions("e", (0, 0), session, -1))
    assert closing.error_code == 0 and closing.session_id == 0 and set(_partitions(closing)) == {0, 1}
    assert _fetch(client, _two_partitions("e", (0, 0), session, 1)).error_code == 70


def test_full_cache_answers_sessionless(broker_factory: Any) -> None:
    broker = broker_factory(**{"max.incremental.fetch.session.cache.slots": "1"})
    with broker.connect() as client:
        create_topic(client, "c", partitions=2)
        assert _fetch(client, _two_partitions("c", (0, 0), 0, 0)).session_id > 0
        second = _fetch(client, _two_partitions("c", (0, 0), 0, 0))
        assert second.error_code == 0 and second.session_id == 0 and set(_partitions(second)) == {0, 1}
