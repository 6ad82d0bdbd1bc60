"""The local controller: decides metadata records, appends them, replays them.

Every mutation runs the same three steps, as Kafka's QuorumController does:

1. decide: a pure function of the current image and the request returns the
   results and the records (topics.py, configs.py, brokers.py);
2. append: the records go to the metadata log as one batch (atomic);
3. replay: the appended records are decoded and applied to the image, the new
   image replaces the old one, and the change listeners run.

This is the single-node quorum. A replicated Raft quorum will replicate the
same log; only step 2 changes (append, replicate, wait for commit), and
followers run step 3 on what they fetch.

Replay applies the records decoded from the bytes that were appended, so a
restarted controller that loads the log arrives at exactly the same image.
Methods are synchronous and must be called from one thread (the event loop).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from klamm.controller.brokers import decide_register_broker, decide_unregister_broker
from klamm.controller.configs import ConfigValidator, decide_alter_broker_configs, decide_alter_topic_configs
from klamm.controller.elections import ElectionOutcome, decide_elect_leaders
from klamm.controller.image import BrokerRegistration, ImageBuilder, MetadataImage, empty_image
from klamm.controller.meta_properties import random_base64_uuid
from klamm.controller.metadata_log import MetadataLog
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.controller.topics import (
    CreatePartitionsResult,
    CreatePartitionsSpec,
    CreateTopicSpec,
    DeleteTopicResult,
    TopicResult,
    decide_create_partitions,
    decide_create_topics,
    decide_delete_topics,
)
from klamm.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "METADATA_VERSION",
    "PRODUCER_ID_BLOCK_SIZE",
    "ChangeListener",
    "Controller",
    "CreatePartitionsResult",
    "CreatePartitionsSpec",
    "CreateTopicSpec",
    "DeleteTopicResult",
    "TopicResult",
]

log = logging.getLogger(__name__)

# The metadata.version feature level written at bootstrap: 3.9-IV0.
METADATA_VERSION = 21
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE

ChangeListener = Callable[[MetadataImage, MetadataImage], None]


class Controller:
    def __init__(self, log: MetadataLog, node_id: int, cluster_id: str | None = None) -> None:
        self.log = log
        self.node_id = node_id
        self.cluster_id = cluster_id or random_base64_uuid()
        self._image = empty_image(self.cluster_id, node_id)
        self._listeners: list[ChangeListener] = []
        self._producer_ids: Iterator[int] = iter(())

    @property
    def image(self) -> MetadataImage:
        return self._image

    def load(self) -> MetadataImage:
        """Replay the whole log into a fresh image; bootstrap an empty log."""
        builder = ImageBuilder(empty_image(self.cluster_id, self.node_id))
        for offset, value in self.log.replay():
            builder.apply(decode_record(value), offset)
        self._swap(builder.build())
        if self.log.end_offset == 0:
            self._commit([MetadataRecord("FeatureLevelRecord", {"name": "metadata.version",
                                                                 "feature_level": METADATA_VERSION})])
        return self._image

    def on_change(self, listener: ChangeListener) -> Callable[[], None]:
        """Call `listener(old_image, new_image)` after every change; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def close(self) -> None:
        self.log.close()

    # -- brokers ---------------------------------------------------------------------

    def register_broker(self, node_id: int, host: str, port: int, listener: str = "PLAINTEXT",
                        rack: str | None = None) -> BrokerRegistration:
        """Register (unfenced) the broker's endpoint; writes only when it is new or changed."""
        records = decide_register_broker(self._image, node_id, host, port, listener, rack)
        if records:
            self._commit(records)
        return self._image.brokers[node_id]

    def unregister_broker(self, node_id: int) -> None:
        records = decide_unregister_broker(self._image, node_id)
        if records:
            self._commit(records)

    # -- topics ------------------------------------------------------------------------

    def create_topics(self, requests: Sequence[CreateTopicSpec], *, validate_only: bool = False,
                      default_partitions: int = 1, default_replication_factor: int = 1,
                      validate_config: ConfigValidator | None = None) -> list[TopicResult]:
        results, records = decide_create_topics(
            self._image, requests, default_partitions=default_partitions,
            default_replication_factor=default_replication_factor, validate_config=validate_config)
        if records and not validate_only:
            self._commit(records)
        return results

    def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]:
        """Delete by name or id; results in request order."""
        results, records = decide_delete_topics(self._image, topics)
        if records:
            self._commit(records)
        return results

    def create_partitions(self, requests: Sequence[CreatePartitionsSpec], *,
                          validate_only: bool = False) -> list[CreatePartitionsResult]:
        results, records = decide_create_partitions(self._image, requests)
        if records and not validate_only:
            self._commit(records)
        return results

    def elect_leaders(self, election: int, partitions: Mapping[str, Sequence[int]]) -> dict[str, list[ElectionOutcome]]:
        """Outcome per requested partition; no records yet (one node has no other replica to elect)."""
        return decide_elect_leaders(self._image, election, partitions)

    # -- configs ------------------------------------------------------------------------

    def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete_configs: Iterable[str] = (),
                            *, replace: bool = False, validate_only: bool = False,
                            validate_config: ConfigValidator | None = None) -> dict[str, str]:
        """Change a topic's explicit configs; returns them as they are (or would be) after.

        `replace` drops every key not in set_configs (AlterConfigs); otherwise
        the change is incremental (IncrementalAlterConfigs SET/DELETE). Raises
        KafkaError: UNKNOWN_TOPIC_OR_PARTITION, or INVALID_CONFIG from the validator.
        """
        configs, records = decide_alter_topic_configs(
            self._image, topic, set_configs, delete_configs, replace=replace, validate_config=validate_config)
        if records and not validate_only:
            self._commit(records)
        return configs

    def alter_broker_configs(self, node_id: int | None, set_configs: Mapping[str, str],
                             delete_configs: Iterable[str] = (), *, replace: bool = False,
                             validate_only: bool = False,
                             validate_config: ConfigValidator | None = None) -> dict[str, str]:
        """Dynamic broker configs of `node_id`, or cluster-wide defaults with node_id None."""
        configs, records = decide_alter_broker_configs(
            self._image, node_id, set_configs, delete_configs, replace=replace, validate_config=validate_config)
        if records and not validate_only:
            self._commit(records)
        return configs

    # -- producer ids ------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, count: int = PRODUCER_ID_BLOCK_SIZE) -> range:
        """Reserve a block of producer ids for a broker (ProducerIdsRecord), as AllocateProducerIds does."""
        if count <= 0:
            raise KafkaError(ErrorCode.invalid_request, "producer id block size must be positive")
        first = self._image.next_producer_id
        broker = self._image.brokers.get(broker_id)
        self._commit([MetadataRecord("ProducerIdsRecord", {
            "broker_id": broker_id,
            "broker_epoch": broker.epoch if broker is not None else -1,
            "next_producer_id": first + count,
        })])
        return range(first, first + count)

    def allocate_producer_id(self) -> int:
        """One producer id for this node, from a block reserved a thousand at a time."""
        producer_id = next(self._producer_ids, None)
        if producer_id is None:
            self._producer_ids = iter(self.allocate_producer_ids(self.node_id))
            producer_id = next(self._producer_ids)
        return producer_id

    # -- append and replay -------------------------------------------------------------

    def _commit(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Append `records` as one batch, replay them and publish the new image."""
        values = [encode_record(record) for record in records]
        last_offset = self.log.append(values)
        first_offset = last_offset - len(values) + 1
        builder = ImageBuilder(self._image)
        for i, value in enumerate(values):
            builder.apply(decode_record(value), first_offset + i)
        self._swap(builder.build())
        return self._image

    def _swap(self, new: MetadataImage) -> None:
        old, self._image = self._image, new
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:  # the change is committed; one bad listener must not hide it from others
                log.exception("metadata change listener failed")
