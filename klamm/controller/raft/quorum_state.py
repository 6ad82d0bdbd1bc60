"""The election state a voter must not forget: its epoch, the leader it knows, the vote it cast.

Raft's safety rests on it: a voter that voted in an epoch must never vote for
another candidate in that epoch, even after a crash, so the state is written
durably before the vote is answered. Kafka keeps it in
`<metadata.log.dir>/__cluster_metadata-0/quorum-state`, a JSON file written to
a temporary file, fsynced and renamed over the old one; `FileQuorumStateStore`
writes the same file (QuorumStateData version 0, the static-quorum form, with
`currentVoters`) and reads versions 0 and 1.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from klamm.controller.raft.messages import NO_LEADER
from klamm.storage.checkpoint import fsync_dir

FILE_NAME = "quorum-state"


@dataclass(frozen=True)
class ElectionState:
    epoch: int = 0
    leader_id: int = NO_LEADER
    voted_id: int = NO_LEADER


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...


class MemoryQuorumStateStore:
    """A store whose writes are durable at once (the simulator's disk)."""

    def __init__(self) -> None:
        self.state: ElectionState | None = None

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state


class FileQuorumStateStore:
    def __init__(self, directory: Path | str, voters: frozenset[int] = frozenset()) -> None:
        self.path = Path(directory) / FILE_NAME
        self.voters = voters

    def read(self) -> ElectionState | None:
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ValueError(f"unreadable quorum state {self.path}: {e}") from e
        if data.get("data_version", 0) not in (0, 1):
            raise ValueError(f"quorum state {self.path} has unknown data_version {data.get('data_version')}")
        return ElectionState(epoch=max(0, int(data.get("leaderEpoch", -1))),
                             leader_id=int(data.get("leaderId", NO_LEADER)),
                             voted_id=int(data.get("votedId", NO_LEADER)))

    def write(self, state: ElectionState) -> None:
        body = {"clusterId": "", "leaderId": state.leader_id, "leaderEpoch": state.epoch, "votedId": state.voted_id,
                "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in sorted(self.voters)],
                "data_version": 0}
        temp = self.path.with_name(FILE_NAME + ".tmp")
        with open(temp, "w", encoding="utf-8") as f:
            f.write(json.dumps(body, separators=(",", ":")))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.path)
        fsync_dir(self.path.parent)
