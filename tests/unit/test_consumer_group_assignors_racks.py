"""The server-side assignors ignore racks, as Kafka 4.0's UniformAssignor and RangeAssignor do."""

from __future__ import annotations

import uuid

import pytest

from klamm.coordinator.assignors import ASSIGNORS, MemberSpec

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_racks_change_no_assignment(name: str) -> None:
    assign = ASSIGNORS[name]
    topics = {T1: 6, T2: 3}
    plain = {f"m{i}": MemberSpec(frozenset({T1, T2}) if i else frozenset({T1})) for i in range(3)}
    racked = {m: MemberSpec(spec.subscribed, rack_id=f"rack-{i % 2}") for i, (m, spec) in enumerate(plain.items())}
    first = assign(plain, topics, {})
    assert assign(racked, topics, {}) == first
    again = {m: MemberSpec(spec.subscribed, rack_id="rack-x") for m, spec in plain.items()}
    assert assign(again, topics, first) == assign(plain, topics, first)
