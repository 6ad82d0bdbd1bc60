"""Topic-level configs (Kafka 4.0 LogConfig), declared once as data.

Each key names its broker synonyms in Kafka's priority order
(ServerTopicConfigSynonyms): the first one set in the broker config supplies
the topic default; hours/minutes synonyms are scaled to milliseconds.
"""

from __future__ import annotations

from klamm.config.definition import (
    HOUR_MS,
    LONG_MAX,
    MINUTE_MS,
    ConfigDef,
    ConfigKey,
    ConfigType as T,
    Importance as I,
    LevelRange,
    OneOf,
    Range,
    Support,
    Synonym as S,
)

__all__ = ["TOPIC_CONFIG_DEF", "COMPRESSION_TYPES", "CLEANUP_POLICIES", "TIMESTAMP_TYPES"]

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

# Codec level bounds (Kafka's GzipCompression / Lz4Compression / ZstdCompression).
GZIP_LEVEL = LevelRange(1, 9, sentinel=-1)
LZ4_LEVEL = LevelRange(1, 17)
ZSTD_LEVEL = LevelRange(-131072, 22)

SEGMENT_BYTES_DEFAULT = 1024 * 1024 * 1024
SEGMENT_BYTES_MIN = 1024 * 1024  # Kafka 4.0 (KIP-1030); was 14 bytes before
WEEK_MS = 7 * 24 * HOUR_MS


def _k(name: str, type_: T, default: object, doc: str, validator=None, synonyms=(), internal=False, *,
       cluster: str = "", unsupported: str = "") -> ConfigKey:
    """One topic key. `cluster=` / `unsupported=` give the reason a key is not applied (see Support);
    its broker synonyms carry the same class (tests/unit/test_config_coverage.py checks it)."""
    return ConfigKey(
        name=name,
        type=type_,
        default=default,
        importance=I.MEDIUM,
        doc=doc,
        validator=validator,
        synonyms=tuple(synonyms),
        internal=internal,
        read_only=False,
        support=Support.CLUSTER if cluster else Support.UNSUPPORTED if unsupported else Support.APPLIED,
        note=cluster or unsupported,
    )


_TIERED = "tiered storage is not implemented"
_THROTTLE = "replication throttling; a single node has no replication traffic, so Kafka with one broker ignores it too"


TOPIC_CONFIG_DEF = ConfigDef([
    _k("cleanup.policy", T.LIST, ["delete"],
       "Retention policy for old segments: 'delete', 'compact', or both.",
       OneOf(CLEANUP_POLICIES), [S("log.cleanup.policy")]),
    _k("compression.gzip.level", T.INT, -1, "Compression level used when compression.type is gzip.",
       GZIP_LEVEL, [S("compression.gzip.level")]),
    _k("compression.lz4.level", T.INT, 9, "Compression level used when compression.type is lz4.",
       LZ4_LEVEL, [S("compression.lz4.level")]),
    _k("compression.type", T.STRING, "producer",
       "Final compression of the topic's data; 'producer' keeps the producer's codec, 'uncompressed' stores plain batches.",
       OneOf(COMPRESSION_TYPES), [S("compression.type")]),
    _k("compression.zstd.level", T.INT, 3, "Compression level used when compression.type is zstd.",
       ZSTD_LEVEL, [S("compression.zstd.level")]),
    _k("delete.retention.ms", T.LONG, 24 * HOUR_MS,
       "How long delete tombstones are kept in a compacted topic.",
       Range(0), [S("log.cleaner.delete.retention.ms")]),
    _k("file.delete.delay.ms", T.LONG, 60000, "Delay before a deleted segment's files are removed from disk.",
       Range(0), [S("log.segment.delete.delay.ms")]),
    _k("flush.messages", T.LONG, LONG_MAX, "Force an fsync after this many messages have been appended.",
       Range(1), [S("log.flush.interval.messages")]),
    _k("flush.ms", T.LONG, LONG_MAX, "Force an fsync when unflushed data is older than this many ms.",
       Range(0), [S("log.flush.interval.ms"), S("log.flush.scheduler.interval.ms")]),
    _k("follower.replication.throttled.replicas", T.LIST, [],
       "Replicas whose follower-side replication is throttled ('partition:broker' pairs or '*').",
       cluster=_THROTTLE),
    _k("index.interval.bytes", T.INT, 4096, "Bytes of log between two offset index entries.",
       Range(0), [S("log.index.interval.bytes")]),
    _k("leader.replication.throttled.replicas", T.LIST, [],
       "Replicas whose leader-side replication is throttled ('partition:broker' pairs or '*').",
       cluster=_THROTTLE),
    _k("local.retention.bytes", T.LONG, -2,
       "Local size bound when tiered storage is on; -2 means use retention.bytes.",
       Range(-2), [S("log.local.retention.bytes")],
       unsupported=_TIERED),
    _k("local.retention.ms", T.LONG, -2,
       "Local time bound when tiered storage is on; -2 means use retention.ms.",
       Range(-2), [S("log.local.retention.ms")],
       unsupported=_TIERED),
    _k("max.compaction.lag.ms", T.LONG, LONG_MAX, "Longest time a record may stay uncompacted.",
       Range(1), [S("log.cleaner.max.compaction.lag.ms")]),
    _k("max.message.bytes", T.INT, 1024 * 1024 + 12, "Largest record batch size the topic accepts.",
       Range(0), [S("message.max.bytes")]),
    _k("message.downconversion.enable", T.BOOLEAN, True,
       "Whether fetches of versions that cannot read record batches (v0-3) get converted message sets; "
       "false answers them UNSUPPORTED_VERSION (Kafka 3.x).",
       None, [S("log.message.downconversion.enable")]),
    _k("message.timestamp.after.max.ms", T.LONG, HOUR_MS,
       "How far in the future a CreateTime timestamp may be, relative to the broker clock.",
       Range(0), [S("log.message.timestamp.after.max.ms")]),
    _k("message.timestamp.before.max.ms", T.LONG, LONG_MAX,
       "How far in the past a CreateTime timestamp may be, relative to the broker clock.",
       Range(0), [S("log.message.timestamp.before.max.ms")]),
    _k("message.timestamp.type", T.STRING, "CreateTime",
       "Whether record timestamps are the producer's CreateTime or the broker's LogAppendTime.",
       OneOf(TIMESTAMP_TYPES), [S("log.message.timestamp.type")]),
    _k("min.cleanable.dirty.ratio", T.DOUBLE, 0.5,
       "Dirty-to-total ratio above which the log becomes eligible for compaction.",
       Range(0, 1), [S("log.cleaner.min.cleanable.ratio")]),
    _k("min.compaction.lag.ms", T.LONG, 0, "Shortest time a record stays uncompacted.",
       Range(0), [S("log.cleaner.min.compaction.lag.ms")]),
    _k("min.insync.replicas", T.INT, 1,
       "Replicas that must acknowledge an acks=all write for it to succeed.",
       Range(1), [S("min.insync.replicas")]),
    _k("preallocate", T.BOOLEAN, False, "Preallocate segment files on disk when they are created.",
       None, [S("log.preallocate")],
       unsupported="segment files are not preallocated"),
    _k("remote.log.copy.disable", T.BOOLEAN, False, "Stop copying segments to tiered storage.",
       unsupported=_TIERED),
    _k("remote.log.delete.on.disable", T.BOOLEAN, False, "Delete remote data when tiered storage is turned off.",
       unsupported=_TIERED),
    _k("remote.storage.enable", T.BOOLEAN, False, "Enable tiered storage for the topic.",
       unsupported=_TIERED),
    _k("retention.bytes", T.LONG, -1, "Largest size a partition may grow to before old segments are deleted; -1 is unlimited.",
       None, [S("log.retention.bytes")]),
    _k("retention.ms", T.LONG, WEEK_MS, "How long data is kept before old segments are deleted; -1 is unlimited.",
       Range(-1), [S("log.retention.ms"), S("log.retention.minutes", MINUTE_MS), S("log.retention.hours", HOUR_MS)]),
    _k("segment.bytes", T.INT, SEGMENT_BYTES_DEFAULT, "Size at which a new log segment is rolled.",
       Range(SEGMENT_BYTES_MIN), [S("log.segment.bytes")]),
    _k("segment.index.bytes", T.INT, 10 * 1024 * 1024, "Maximum size of a segment's offset and time index files.",
       Range(4), [S("log.index.size.max.bytes")]),
    _k("segment.jitter.ms", T.LONG, 0, "Random amount subtracted from segment.ms to spread segment rolls.",
       Range(0), [S("log.roll.jitter.ms"), S("log.roll.jitter.hours", HOUR_MS)],
       unsupported="segments roll at segment.ms without jitter"),
    _k("segment.ms", T.LONG, WEEK_MS, "Age after which the active segment is rolled even if not full.",
       Range(1), [S("log.roll.ms"), S("log.roll.hours", HOUR_MS)]),
    _k("unclean.leader.election.enable", T.BOOLEAN, False,
       "Allow an out-of-sync replica to become leader as a last resort (may lose data).",
       None, [S("unclean.leader.election.enable")]),
    # Kafka's testing-only override of segment.bytes without the 1 MiB floor.
    _k("internal.segment.bytes", T.INT, None, "Segment size override for tests (no lower bound).",
       Range(1), internal=True),
])
