"""The replication state machines under the deterministic simulator (tests/sim/replication.py).

Each seed runs about 28 simulated seconds of one partition on three brokers with
messages dropped, delayed, duplicated and reordered, brokers killed and cut off,
and an acks=all producer; the invariants are checked after every event, and the
cluster must converge once the faults stop.

    KLAMM_SIM_SEEDS=500 pytest tests/unit/test_replication_sim.py   # more seeds
    KLAMM_SIM_SEED=1234 pytest tests/unit/test_replication_sim.py   # replay one, with its trace

The last tests inject known bugs and require the simulator to catch each: a
checker that cannot fail would prove nothing.
"""

from __future__ import annotations

import os
from unittest import mock

import pytest

import tests.sim.replication as sim
from klamm.broker import replication
from klamm.controller import partition_changes

SEEDS = [int(os.environ["KLAMM_SIM_SEED"])] if "KLAMM_SIM_SEED" in os.environ \
    else range(int(os.environ.get("KLAMM_SIM_SEEDS", "25")))


@pytest.mark.parametrize("seed", SEEDS)
def test_seed(seed: int) -> None:
    simulation = sim.Simulation(seed, trace=True)
    try:
        simulation.run()
    except sim.InvariantViolation as violation:
        trace = "\n".join(simulation.trace[-60:])
        pytest.fail(f"seed {seed} at t={simulation.now} ms: {violation}\n(replay: KLAMM_SIM_SEED={seed})\n{trace}")
    assert simulation.acked


def test_a_seed_replays_exactly() -> None:
    first, second = sim.Simulation(7, trace=True), sim.Simulation(7, trace=True)
    first.run()
    second.run()
    assert first.trace == second.trace and first.acked == second.acked


def first_violation(seeds: int = 60) -> str | None:
    for seed in range(seeds):
        try:
            sim.run_seed(seed)
        except sim.InvariantViolation as violation:
            return str(violation)
    return None


def _hw_ignoring_the_last_isr_member(self: replication.LeaderState, now_ms: int) -> bool:
    candidate = self.log_end_offset
    counted = self.maximal_isr[:-1] if len(self.maximal_isr) > 1 else self.maximal_isr
    for replica in counted:
        if replica != self.local_id:
            candidate = min(candidate, self.follower_log_end_offset(replica))
    if candidate > self.high_watermark:
        self.high_watermark = candidate
        return True
    return False


def _expand_ignoring_the_epoch_start(self: replication.LeaderState, replica_id: int, follower) -> object:
    if self.pending is not None or replica_id in self.isr or follower.log_end_offset < self.high_watermark:
        return None
    return self._propose(self.isr + (replica_id,))


@pytest.mark.parametrize("bug", [
    mock.patch.object(replication.LeaderState, "_maybe_advance_high_watermark", _hw_ignoring_the_last_isr_member),
    mock.patch.object(replication.LeaderState, "_maybe_expand", _expand_ignoring_the_epoch_start),
    mock.patch.object(partition_changes, "unclean_allowed", lambda topic, default=False: True),
    mock.patch.object(sim, "truncation_offset", lambda diverging, local, log_end_offset: log_end_offset),
], ids=["hw-ignores-an-isr-member", "isr-join-before-the-epoch-start", "unclean-elections", "no-truncation"])
def test_the_simulator_catches_a_known_bug(bug) -> None:
    with bug:
        assert first_violation() is not None
