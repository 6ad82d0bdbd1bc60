"""Authorization of ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848), as Kafka's KafkaApis checks them,
against a SASL broker with the StandardAuthorizer (tests/integration/secured.py). User:admin is a super user."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import ResourceType as Res

from tests.integration.conftest import BrokerThread, RawClient, create_topic, wait_for
from tests.integration.secured import acl, grant, sasl_client, secured_broker

pytestmark = pytest.mark.timeout(180)

FIND_COORDINATOR, HEARTBEAT, DESCRIBE = 10, 68, 69
NONE, UNKNOWN_MEMBER, TOPIC_DENIED, GROUP_DENIED, STALE_EPOCH = 0, 25, 29, 30, 113


@pytest.fixture
def broker(broker_factory: Any) -> BrokerThread:
    broker = secured_broker(broker_factory)
    with sasl_client(broker, "admin") as admin:
        wait_for(lambda: admin.request(FIND_COORDINATOR, 3, {"key": "any", "key_type": 0}).error_code == NONE)
        create_topic(admin, "seen", 2)
        create_topic(admin, "hidden", 2)
    return broker


@pytest.fixture
def alice(broker: BrokerThread) -> Iterator[RawClient]:
    with sasl_client(broker, "alice") as client:
        yield client


def join(client: RawClient, group: str, topics: list[str]) -> Any:
    return client.request(HEARTBEAT, 1, {"group_id": group, "member_id": "member-1", "member_epoch": 0,
                                         "rebalance_timeout": 30000, "subscribed_topic_names": topics,
                                         "topic_partitions": []})


def test_heartbeat_needs_read_on_the_group_and_describe_on_its_topics(broker: BrokerThread, alice: RawClient) -> None:
    assert join(alice, "g", ["seen"]).error_code == GROUP_DENIED
    grant(broker, acl("alice", Res.GROUP, "g", Op.READ))
    denied = join(alice, "g", ["seen", "hidden"])
    assert denied.error_code == TOPIC_DENIED and "hidden" in denied.error_message
    grant(broker, acl("alice", Res.TOPIC, "seen", Op.DESCRIBE))
    joined = join(alice, "g", ["seen"])
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (NONE, "member-1", 1)
    assert sorted(p for tp in joined.assignment.topic_partitions for p in tp.partitions) == [0, 1]


def test_describe_needs_describe_on_the_group_and_its_topics(broker: BrokerThread, alice: RawClient) -> None:
    with sasl_client(broker, "admin") as admin:
        assert join(admin, "g", ["seen", "hidden"]).error_code == NONE
    described = alice.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
    assert described.groups[0].error_code == GROUP_DENIED
    grant(broker, acl("alice", Res.GROUP, "g", Op.DESCRIBE), acl("alice", Res.TOPIC, "seen", Op.DESCRIBE))
    described = alice.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
    assert described.groups[0].error_code == TOPIC_DENIED  # a member subscribes to "hidden"
    grant(broker, acl("alice", Res.TOPIC, "hidden", Op.DESCRIBE))
    described = alice.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": True})
    group = described.groups[0]
    assert (group.error_code, group.group_state, group.group_epoch) == (NONE, "Stable", 1)
    assert [m.member_id for m in group.members] == ["member-1"]
    assert group.authorized_operations != -2147483648


def test_offset_commit_and_fetch_v9_check_the_member_epoch(broker: BrokerThread) -> None:
    """Not authorization: OffsetCommit/OffsetFetch v9 from a consumer-protocol member, as Kafka checks them."""
    with sasl_client(broker, "admin") as admin:
        assert join(admin, "g", ["seen"]).member_epoch == 1

        def commit(epoch: int) -> int:
            response = admin.request(8, 9, {"group_id": "g", "generation_id_or_member_epoch": epoch,
                                            "member_id": "member-1", "topics": [{"name": "seen", "partitions": [
                                                {"partition_index": 0, "committed_offset": 5,
                                                 "committed_metadata": ""}]}]})
            return response.topics[0].partitions[0].error_code

        def fetch(epoch: int, member: str | None = "member-1") -> Any:
            return admin.request(9, 9, {"groups": [{"group_id": "g", "member_id": member, "member_epoch": epoch,
                                                    "topics": None}], "require_stable": False}).groups[0]

        assert commit(0) == STALE_EPOCH
        assert commit(1) == NONE
        assert fetch(0).error_code == STALE_EPOCH
        fetched = fetch(1)
        assert fetched.error_code == NONE and fetched.topics[0].partitions[0].committed_offset == 5
        assert fetch(-1, None).error_code == NONE  # the admin client
        assert fetch(1, "stranger").error_code == UNKNOWN_MEMBER


def test_describe_groups_v6_names_a_consumer_group_as_not_classic(broker: BrokerThread) -> None:
    """Kafka 4: DescribeGroups v6 answers GROUP_ID_NOT_FOUND with a message for a consumer group or no group;
    v5 describes both as Dead without error."""
    with sasl_client(broker, "admin") as admin:
        assert join(admin, "g", ["seen"]).error_code == NONE
        v6 = admin.request(15, 6, {"groups": ["g", "absent"], "include_authorized_operations": False})
        assert [(g.error_code, g.error_message, g.group_state) for g in v6.groups] == [
            (69, "Group g is not a classic group.", "Dead"), (69, "Group absent not found.", "Dead")]
        v5 = admin.request(15, 5, {"groups": ["g"], "include_authorized_operations": False})
        assert (v5.groups[0].error_code, v5.groups[0].group_state) == (NONE, "Dead")


def test_consumer_group_describe_v1_tells_the_member_type(broker: BrokerThread) -> None:
    with sasl_client(broker, "admin") as admin:
        assert join(admin, "g", ["seen"]).error_code == NONE
        v1 = admin.request(DESCRIBE, 1, {"group_ids": ["g"], "include_authorized_operations": False})
        assert [(m.member_id, m.member_type) for m in v1.groups[0].members] == [("member-1", 1)]


def test_v0_makes_the_member_id_of_a_joining_member_v1_requires_one(broker: BrokerThread) -> None:
    """ConsumerGroupHeartbeat v0: a joining member may send no member id, and the coordinator makes one (a base64
    UUID, as Kafka's); v1 (KIP-1082) refuses an empty member id."""
    body = {"group_id": "v0-group", "member_id": "", "member_epoch": 0, "rebalance_timeout": 30000,
            "subscribed_topic_names": ["seen"], "topic_partitions": []}
    with sasl_client(broker, "admin") as admin:
        joined = admin.request(HEARTBEAT, 0, body)
        assert (joined.error_code, joined.member_epoch, len(joined.member_id)) == (NONE, 1, 22)
        again = admin.request(HEARTBEAT, 0, {**body, "member_id": joined.member_id, "member_epoch": 1,
                                             "subscribed_topic_names": None, "topic_partitions": None})
        assert (again.error_code, again.member_id) == (NONE, joined.member_id)
        refused = admin.request(HEARTBEAT, 1, {**body, "group_id": "v1-group"})
        assert (refused.error_code, refused.error_message) == (42, "MemberId can't be empty.")
