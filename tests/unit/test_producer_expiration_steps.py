"""The producer-id expiration pass walks the hosted partitions in steps (about 2 us a partition: 6 ms in one
callback at 3,000 partitions), leaving out a partition gone between two steps."""

from __future__ import annotations

from types import SimpleNamespace

from klamm.broker.producer_expiration import PARTITIONS_A_STEP, expire_producers
from klamm.steps import run_steps

NOW, EXPIRATION = 1_000_000, 60_000


def partition(seen: list[str], name: str) -> SimpleNamespace:
    def remove_expired_producers(now_ms: int, expiration_ms: int) -> int:
        assert (now_ms, expiration_ms) == (NOW, EXPIRATION)
        seen.append(name)
        return 2

    guards: list[int] = []
    return SimpleNamespace(log=SimpleNamespace(producer_state=SimpleNamespace(
        remove_expired_producers=remove_expired_producers)), expire_verification_guards=guards.append, guards=guards)


def test_the_pass_yields_every_step_and_counts_what_it_removed() -> None:
    seen: list[str] = []
    hosted = {("t", n): partition(seen, f"t-{n}") for n in range(3 * PARTITIONS_A_STEP)}
    steps = expire_producers(hosted, NOW, EXPIRATION)
    next(steps)
    assert len(seen) == PARTITIONS_A_STEP - 1  # the first step stopped short of the rest
    assert run_steps(steps) == 2 * len(hosted)
    assert seen == [f"t-{n}" for n in range(len(hosted))]
    assert all(p.guards == [NOW - EXPIRATION] for p in hosted.values())


def test_a_partition_gone_between_two_steps_is_left_out_and_one_replaced_taken_as_it_is() -> None:
    seen: list[str] = []
    hosted = {("t", n): partition(seen, f"t-{n}") for n in range(2 * PARTITIONS_A_STEP)}
    steps = expire_producers(hosted, NOW, EXPIRATION)
    next(steps)
    del hosted[("t", 2 * PARTITIONS_A_STEP - 1)]
    hosted[("t", PARTITIONS_A_STEP)] = partition(seen, "recreated")  # another partition object under the name
    assert run_steps(steps) == 2 * (2 * PARTITIONS_A_STEP - 1)
    assert "t-%d" % (2 * PARTITIONS_A_STEP - 1) not in seen and "t-%d" % PARTITIONS_A_STEP not in seen
    assert "recreated" in seen
