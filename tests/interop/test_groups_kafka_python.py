"""Consumer groups with kafka-python: three members in threads, a leave, commits, and KafkaAdminClient."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from tests.conftest import BrokerFactory

from .helpers import create_topic

pytestmark = [pytest.mark.timeout(120)]

PARTITIONS = 6
RECORDS = 120


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-kafka-python"))
    # Kafka's default group.initial.rebalance.delay.ms (3 s): the three members form the first generation
    # together. With no delay the first member leads a generation of its own before its metadata has the
    # topic, and the group goes through a rebalance per member (the other group suites cover that path).
    yield factory()
    factory.close()


class Member(threading.Thread):
    """A subscribed KafkaConsumer polled by its own thread; commits synchronously after each poll."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=6000, heartbeat_interval_ms=500, max_poll_records=5)
        self.stop = threading.Event()
        self.assigned: set[int] = set()
        self.consumed: list[tuple[int, int]] = []
        self.failure: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                batches = self.consumer.poll(100)
                for records in batches.values():
                    self.consumed += [(r.partition, r.offset) for r in records]
                if batches:
                    self.consumer.commit()
                self.assigned = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as exc:  # reported by the test
            self.failure = exc
        finally:
            self.consumer.close()  # LeaveGroup

    def close(self) -> None:
        self.stop.set()
        self.join(20)


def wait_covered(members: list[Member], timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while True:
        sets = [m.assigned for m in members]
        if all(sets) and sorted(p for s in sets for p in s) == list(range(PARTITIONS)):
            return
        assert all(m.failure is None for m in members), [m.failure for m in members]
        assert time.monotonic() < deadline, f"partitions never covered: {sets}"
        time.sleep(0.05)


def test_group_and_admin(group_broker, topic, caplog):
    caplog.set_level(logging.INFO, logger="kafka.coordinator")  # joins, leaves and errors, if this fails
    bs = group_broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=bs)
    for i in range(RECORDS):
        producer.send(topic, value=str(i).encode(), partition=i % PARTITIONS)
    producer.flush()
    producer.close()

    members = [Member(bs, topic, "kp-group") for _ in range(3)]
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        wait_covered(members)
        members[0].close()
        wait_covered(members[1:])
        deadline = time.monotonic() + 30
        while sum(len(m.consumed) for m in members) < RECORDS and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the last commits
        groups = {g["group_id"]: g for g in admin.list_groups()}
        assert groups["kp-group"]["group_state"] == "Stable"
        described = admin.describe_groups(["kp-group"])["kp-group"]
        assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
        assert len(described["members"]) == 2
        assigned = sorted(p for m in described["members"]
                          for a in m["member_assignment"]["assigned_partitions"] for p in a["partitions"])
        assert assigned == list(range(PARTITIONS))
    finally:
        for m in members[1:]:
            m.close()
    consumed = sorted(pos for m in members for pos in m.consumed)
    assert sorted(set(consumed)) == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS))
    try:
        offsets = admin.list_group_offsets({"kp-group": None})["kp-group"]
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {p: 20 for p in range(PARTITIONS)}
        admin.alter_group_offsets("kp-group", {TopicPartition(topic, 0): OffsetAndMetadata(3, "", -1)})
        admin.delete_group_offsets("kp-group", [TopicPartition(topic, 1)])
        offsets = admin.list_group_offsets({"kp-group": None})["kp-group"]
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: 3, 2: 20, 3: 20, 4: 20, 5: 20}
        assert admin.describe_groups(["kp-group"])["kp-group"]["group_state"] == "Empty"
        assert admin.delete_groups(["kp-group"]) == {"kp-group": "OK"}
        assert "kp-group" not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
