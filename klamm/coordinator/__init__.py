"""The classic group coordinator: consumer groups and their committed offsets.

Modules:
  partitioning  group id -> partition of __consumer_offsets (Java's String.hashCode)
  records       the keys and values of __consumer_offsets, in Kafka's formats
  timer         deadlines driven by an injected clock (session, rebalance, retention)
  group         one classic group: members, state, protocol selection
  coordinator   the state machine: JoinGroup/SyncGroup/Heartbeat/LeaveGroup, offsets, admin
  runtime       asyncio glue in the broker: the internal topic, loading, appends, timers
"""
