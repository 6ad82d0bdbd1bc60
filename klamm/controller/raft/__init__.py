"""KRaft: the Raft quorum that replicates `__cluster_metadata` among the controllers.

`node.RaftNode` is the protocol as a sans-io state machine (Kafka's
KafkaRaftClient and QuorumState), `messages` its RPCs as plain values, `log` what
it needs of a log, `quorum_state` the election state it keeps durably. The
deterministic simulator in tests/sim/raft.py drives several of them through a
faulty network, crashes and restarts, checking Raft's invariants after every event.
"""
