"""TxnOffsetCommit v0-2 carries no member id or generation: Kafka accepts such a transactional
commit into a group that has active members (aiokafka's send_offsets_to_transaction sends them so),
while a commit that names a member is still checked against the group."""

from __future__ import annotations

from typing import Any

import pytest

from klamm.protocol.errors import ErrorCode

from tests.integration.conftest import BrokerThread, RawClient, create_topic
from tests.integration.test_coordinator_failures import (TXN_OFFSET_COMMIT, committed, end_txn, find, init, join,
                                                        sync)

ADD_OFFSETS = 25


@pytest.fixture
def broker(broker_factory: Any) -> BrokerThread:
    return broker_factory(**{"group.initial.rebalance.delay.ms": "0"})


def stable_group(client: RawClient, group: str) -> Any:
    find(client, group)
    joined = join(client, group)
    assert sync(client, group, joined.member_id, joined.generation_id).error_code == 0
    return joined


def txn_commit(client: RawClient, version: int, group: str, pid: int, offset: int, **member: Any) -> int:
    body = {"transactional_id": "tid", "group_id": group, "producer_id": pid, "producer_epoch": 0, **member,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    return client.request(TXN_OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code


@pytest.mark.parametrize("version", [0, 1, 2])
def test_commit_without_member_into_an_active_group(client: RawClient, version: int) -> None:
    create_topic(client, "t")
    stable_group(client, "g")
    pid = init(client, "tid").producer_id
    added = client.request(ADD_OFFSETS, 1, {"transactional_id": "tid", "producer_id": pid, "producer_epoch": 0,
                                            "group_id": "g"})
    assert added.error_code == 0
    assert txn_commit(client, version, "g", pid, 42) == 0
    assert end_txn(client, "tid", pid, True) == 0
    assert committed(client, "g", "t") == 42


def test_commit_naming_a_member_is_still_checked(client: RawClient) -> None:
    create_topic(client, "t")
    joined = stable_group(client, "g")
    pid = init(client, "tid").producer_id
    client.request(ADD_OFFSETS, 1, {"transactional_id": "tid", "producer_id": pid, "producer_epoch": 0,
                                    "group_id": "g"})
    unknown = txn_commit(client, 3, "g", pid, 1, member_id="someone-else", generation_id=joined.generation_id)
    assert unknown == ErrorCode.unknown_member_id.value
    stale = txn_commit(client, 3, "g", pid, 1, member_id=joined.member_id, generation_id=joined.generation_id + 1)
    assert stale == ErrorCode.illegal_generation.value
    assert txn_commit(client, 3, "g", pid, 7, member_id=joined.member_id, generation_id=joined.generation_id) == 0
    assert txn_commit(client, 3, "g", pid, 8, member_id="", generation_id=-1) == 0
