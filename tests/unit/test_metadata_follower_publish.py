"""A broker that follows the controller serves a metadata change before it has applied it to its replicas.

Applying new topics waits for their logs, made beside the event loop (ReplicaManager.logs_made_for): tens of
milliseconds on a slow disk. Kafka's broker hands a new image to its metadata cache before its replica manager
applies it, so a client asking any broker right after CreateTopics answered finds the topic; klamm's follower
does the same, and a partition not hosted yet answers NOT_LEADER_OR_FOLLOWER, which clients retry.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from klamm.broker.metadata_follower import MetadataFollower
from klamm.controller.image import empty_image
from klamm.controller.records import encode_record
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import build_batch
from tests.unit.test_prepare_logs import create_records
from tests.unit.test_replica_manager_delta import broker_records, manager, replay

pytestmark = pytest.mark.asyncio


class OneFetch:
    """A controller connection whose first metadata fetch returns `batch`, committed; later ones never answer."""

    def __init__(self, batch: bytes, high_watermark: int) -> None:
        self.batch, self.high_watermark, self.fetches = batch, high_watermark, 0

    async def request(self, *_: Any) -> Any:
        self.fetches += 1
        if self.fetches > 1:
            await asyncio.Event().wait()
        entry = SimpleNamespace(error_code=ErrorCode.none, high_watermark=self.high_watermark, records=self.batch,
                                snapshot_id=SimpleNamespace(end_offset=-1, epoch=-1))
        return SimpleNamespace(responses=[SimpleNamespace(partitions=[entry])])


async def test_a_new_topic_is_served_while_its_logs_are_made_and_applied_after(tmp_path: Path) -> None:
    image = replay(empty_image("c", 0), broker_records())
    records = create_records(image, "wide", 6)
    everything = broker_records() + records
    batch = build_batch([(None, encode_record(r)) for r in everything])
    making, made = asyncio.Event(), asyncio.Event()

    @asynccontextmanager
    async def logs_made_for(_records: Any, _image: Any):  # type: ignore[no-untyped-def]
        making.set()
        await made.wait()
        yield

    follower = MetadataFollower(1, "c", 0, lambda: OneFetch(batch, len(everything)),  # type: ignore[arg-type]
                                prepare=logs_made_for)
    replicas, _ = manager(tmp_path)
    replicas.served_image = lambda: follower.image
    applied: list[int] = []
    follower.on_change(lambda _old, new: (applied.append(new.offset), replicas.apply_image(new)))
    task = asyncio.ensure_future(follower.run())
    try:
        await asyncio.wait_for(making.wait(), 5)
        assert "wide" in follower.image.topics_by_name and applied == []
        with pytest.raises(KafkaError) as refused:
            replicas.get("wide", 0)
        assert refused.value.code == ErrorCode.not_leader_or_follower
        with pytest.raises(KafkaError) as unknown:
            replicas.get("wide", 6)
        assert unknown.value.code == ErrorCode.unknown_topic_or_partition
        made.set()
        await asyncio.wait_for(follower.caught_up.wait(), 5)
        assert applied == [len(everything) - 1]
        assert replicas.get("wide", 0).topic == "wide"
    finally:
        task.cancel()
