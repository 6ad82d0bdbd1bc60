"""The KRaft core (klamm.controller.raft) under the deterministic simulator (tests/sim/raft.py).

Each seed runs about 32 simulated seconds of a quorum — three voters and an
observer, or five voters with a longer append linger — with messages dropped, delayed, duplicated and
reordered, links cut one way or both, nodes crashing (losing what they had not
flushed) and restarting, leaders resigning, and snapshots cleaning the logs
behind them. Raft's invariants are checked after every event, and once the
faults stop the quorum must converge.

    KLAMM_RAFT_SEEDS=20000 pytest tests/unit/test_raft_sim.py   # more seeds
    KLAMM_RAFT_SEED=1234 pytest tests/unit/test_raft_sim.py     # replay one, with its trace

The last tests inject known bugs into the core and require the simulator to
catch each: a checker that cannot fail would prove nothing.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest

import tests.sim.raft as sim
from klamm.controller.raft.node import RaftNode

THREE = sim.Config()
# A longer linger leaves a leader's appends unflushed for longer, for crashes to find.
FIVE = dataclasses.replace(THREE, voters=5, observers=0, raft=dataclasses.replace(THREE.raft, append_linger_ms=40))
THREE_LINGERING = dataclasses.replace(THREE, raft=FIVE.raft)

if "KLAMM_RAFT_SEED" in os.environ:
    CASES = [(THREE, int(os.environ["KLAMM_RAFT_SEED"])), (FIVE, int(os.environ["KLAMM_RAFT_SEED"]))]
else:
    _count = int(os.environ.get("KLAMM_RAFT_SEEDS", "800"))  # ~0.1 s each; more by hand or in a soak
    CASES = [(THREE, seed) for seed in range(_count * 3 // 4)] + [(FIVE, seed) for seed in range(_count // 4)]


@pytest.mark.parametrize(("config", "seed"), CASES, ids=lambda v: f"{v.voters}v" if isinstance(v, sim.Config) else v)
def test_seed(config: sim.Config, seed: int) -> None:
    try:
        sim.run_seed(seed, config)
    except (sim.InvariantViolation, AssertionError) as violation:
        replay = sim.Simulation(seed, config, trace=True)
        try:
            replay.run()
        except (sim.InvariantViolation, AssertionError):
            pass
        trace = "\n".join(list(replay.trace)[-80:])
        pytest.fail(f"{config.voters} voters, seed {seed} at t={replay.now} ms: {violation}\n"
                    f"(replay: KLAMM_RAFT_SEED={seed})\n{trace}")


def test_a_seed_replays_exactly() -> None:
    first, second = sim.Simulation(11, trace=True), sim.Simulation(11, trace=True)
    first.run()
    second.run()
    assert list(first.trace) == list(second.trace)
    assert first.checker.committed == second.checker.committed and first.checker.committed


def test_a_run_commits_through_faults() -> None:
    """The simulator really exercises the quorum: several epochs, snapshots, truncations, a lot committed."""
    simulation = sim.run_seed(5)
    assert len(simulation.checker.leaders) >= 3
    assert simulation.checker.committed_end > 200
    assert any(log.start_offset > 0 for log in simulation.logs.values())


# -- the simulator catches bugs --------------------------------------------------------------------

def first_violation(config: sim.Config = THREE, seeds: int = 400) -> str | None:
    for seed in range(seeds):
        try:
            sim.run_seed(seed, config)
        except (sim.InvariantViolation, AssertionError) as violation:
            return str(violation)
    return None


def _patched(name: str, replacement: Callable[..., Any]) -> Any:
    return mock.patch.object(RaftNode, name, replacement)


def test_catches_votes_granted_to_a_stale_log() -> None:
    original = RaftNode._can_grant

    def grant_whatever_the_log(self: RaftNode, request: Any, up_to_date: bool, now_ms: int) -> bool:
        return original(self, request, True, now_ms)

    with _patched("_can_grant", grant_whatever_the_log):
        assert first_violation() is not None


def test_catches_a_leader_counting_what_it_has_not_flushed() -> None:
    def counts_unflushed(self: RaftNode, now_ms: int) -> None:
        offsets = sorted([self.log.end_offset] + [p.end_offset for p in self._progress.values()], reverse=True)
        candidate = offsets[len(self.voters) // 2]
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            self._complete_parked(now_ms)

    with _patched("_update_high_watermark", counts_unflushed):
        assert first_violation(THREE_LINGERING) is not None


def test_catches_a_follower_that_does_not_truncate() -> None:
    with _patched("_truncate", lambda self, diverging: None):
        assert first_violation() is not None
