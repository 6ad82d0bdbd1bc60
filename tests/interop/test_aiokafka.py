"""aiokafka against the broker: producer + assign/seek consumer, every codec."""

from __future__ import annotations

import pytest

from .helpers import aio_consume, aio_produce, aio_recs, create_topic
from .records import CODECS, diff, expected

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("acks", [1, "all"])
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(broker, topic, codec, acks):
    create_topic(broker.bootstrap, topic)
    want = expected("aio", 40, size=120, both_null=False)
    offsets = aio_produce(broker.bootstrap, topic, want, codec=codec, acks=acks)
    assert offsets == list(range(len(want)))
    msgs = aio_consume(broker.bootstrap, topic, 0, 0, len(want))
    assert [m.offset for m in msgs] == list(range(len(want)))
    got = aio_recs(msgs)
    assert got == want, diff(got, want)
    assert all(m.timestamp_type == 0 and m.timestamp > 0 for m in msgs)


def test_seek_into_middle(broker, topic):
    create_topic(broker.bootstrap, topic)
    want = expected("aiom", 30, both_null=False)
    aio_produce(broker.bootstrap, topic, want[:15], codec="snappy")
    aio_produce(broker.bootstrap, topic, want[15:], codec="zstd")
    msgs = aio_consume(broker.bootstrap, topic, 0, 12, 10)
    assert [m.offset for m in msgs] == list(range(12, 22))
    assert aio_recs(msgs) == want[12:22]
