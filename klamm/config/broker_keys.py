"""Broker configs (Kafka 4.0 KafkaConfig and friends), declared once as data.

Defaults are Kafka's except where klamm's embedded single-node default differs;
those entries carry `kafka_default` with Kafka's value. klamm-only keys
(cluster.id, metrics.*) are marked in their docs.
"""

from __future__ import annotations

from klamm.config.definition import (
    DOUBLE_MAX,
    HOUR_MS,
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    ConfigKey,
    ConfigType as T,
    Importance as I,
    OneOf,
    Range,
    Support,
)
from klamm.config.errors import ConfigError
from klamm.config.topic_keys import (
    CLEANUP_POLICIES,
    COMPRESSION_TYPES,
    GZIP_LEVEL,
    LZ4_LEVEL,
    SEGMENT_BYTES_DEFAULT,
    SEGMENT_BYTES_MIN,
    TIMESTAMP_TYPES,
    ZSTD_LEVEL,
)

__all__ = ["BROKER_CONFIG_DEF", "DEFAULT_LISTENERS", "DEFAULT_LOG_DIR", "METRICS_PORT_DEFAULT", "STANDARD_AUTHORIZER"]

DEFAULT_LISTENERS = ["PLAINTEXT://127.0.0.1:9092"]
DEFAULT_LOG_DIR = "./klamm-data"
METRICS_PORT_DEFAULT = -1  # off unless asked for: fixed ports collide when tests start many brokers
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"  # klamm.broker.replica_selector
PROTOCOL_MAP_DEFAULT = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"

H, M, L = I.HIGH, I.MEDIUM, I.LOW


def _k(name: str, type_: T, default: object, importance: I, doc: str, validator=None, *,
       derived: bool = False, internal: bool = False, kafka_default: object = ...,
       cluster: str = "", unsupported: str = "", accepts: tuple[object, ...] = ()) -> ConfigKey:
    """One broker key. `cluster=` / `unsupported=` give the reason a key is not applied (see Support)."""
    support = Support.CLUSTER if cluster else Support.UNSUPPORTED if unsupported else Support.APPLIED
    return ConfigKey(name=name, type=type_, default=default, importance=importance, doc=doc,
                     validator=validator, derived=derived, internal=internal, kafka_default=kafka_default,
                     support=support, note=cluster or unsupported, accepts=accepts)


# Reasons shared by several keys.
_NO_FOLLOWERS = "follower replication; a single node has no followers, so Kafka with one broker ignores it too"
_TIERED = "tiered storage is not implemented"
_NO_POLICY = "klamm loads no policy plugins"
_LOAD_BUFFER = "coordinators load their partitions batch by batch, with no fixed read buffer"
_JITTER = "segments roll at segment.ms without jitter (segment.jitter.ms is not implemented)"
_INTERNAL_RF = ("replicas of an internal topic are capped at the live brokers when it is created "
                "(Broker.create_internal_topic), so a single node creates it with one")


_GENERAL = [
    _k("node.id", T.INT, 1, H, "Id of this node in the cluster (klamm defaults to 1 for a single node).",
       kafka_default=-1),
    _k("broker.id", T.INT, -1, H, "Broker id; -1 means use node.id."),
    _k("process.roles", T.LIST, ["broker", "controller"], H,
       "Roles this process plays: broker, controller, or broker,controller (a combined node).",
       OneOf(("broker", "controller")), kafka_default=[]),
    _k("cluster.id", T.STRING, None, H,
       "klamm: cluster id; when unset one is generated on first start and stored with the data."),
    _k("controller.listener.names", T.STRING, None, H, "Comma-separated names of the listeners used by the controller."),
    _k("controller.quorum.voters", T.LIST, [], H,
       "Static controller quorum as id@host:port entries: one voter, or several dedicated controllers."),
    _k("controller.quorum.election.timeout.ms", T.INT, 1000, H,
       "How long a voter waits without a leader before it starts an election (randomized up to twice this).",
       Range(1)),
    _k("controller.quorum.fetch.timeout.ms", T.INT, 2000, H,
       "How long a follower waits without a successful fetch from the leader before it seeks another.", Range(1)),
    _k("controller.quorum.election.backoff.max.ms", T.INT, 1000, H,
       "The longest a voter waits before it stands again after a lost election.", Range(1)),
    _k("controller.quorum.request.timeout.ms", T.INT, 2000, M,
       "How long a quorum request may take; a broker's metadata fetch from the controller too, beyond its wait.",
       Range(1)),
    _k("controller.quorum.retry.backoff.ms", T.INT, 20, L, "The pause before a failed quorum request is retried.",
       Range(0)),
    _k("controller.quorum.append.linger.ms", T.INT, 25, M,
       "How long the leader gathers appends before it flushes them to disk.", Range(0)),
    _k("broker.session.timeout.ms", T.INT, 9000, H,
       "A broker without a heartbeat for this long is fenced by the controller.", Range(1)),
    _k("broker.heartbeat.interval.ms", T.INT, 2000, M, "How often a broker heartbeats to the controller.", Range(1)),
    _k("controller.quorum.bootstrap.servers", T.LIST, [], H, "host:port list used to discover the controller quorum.",
       cluster="with process.roles=broker,controller this node is the whole quorum and contacts no other"),
    _k("broker.rack", T.STRING, None, M, "Rack of the broker, for rack-aware replica placement."),
    _k("message.max.bytes", T.INT, 1024 * 1024 + 12, H, "Largest record batch size the broker accepts (topic: max.message.bytes).",
       Range(0)),
    _k("num.network.threads", T.INT, 3, H, "Threads receiving requests and sending responses.", Range(1)),
    _k("num.io.threads", T.INT, 8, H, "Threads processing requests.", Range(1),
       unsupported="requests are handled on the event loop; there is no I/O thread pool"),
    _k("background.threads", T.INT, 10, H, "Threads for background tasks.", Range(1),
       unsupported="background work runs as event-loop tasks; there is no background thread pool"),
    _k("queued.max.requests", T.INT, 500, H, "Requests queued before network threads stop reading.", Range(1)),
    _k("queued.max.request.bytes", T.LONG, -1, M, "Queued request bytes before reading stops; -1 is unlimited."),
    _k("request.timeout.ms", T.INT, 30000, H, "Time the broker's own clients wait for a response.",
       cluster="the timeout of this broker's own requests to other nodes; a single node sends none"),
    _k("delete.topic.enable", T.BOOLEAN, True, H, "Allow topics to be deleted."),
    _k("auto.create.topics.enable", T.BOOLEAN, True, H, "Create unknown topics automatically on metadata requests."),
    _k("compression.type", T.STRING, "producer", H, "Default final compression for topics (topic: compression.type).",
       OneOf(COMPRESSION_TYPES)),
    _k("compression.gzip.level", T.INT, -1, M, "Default gzip level.", GZIP_LEVEL),
    _k("compression.lz4.level", T.INT, 9, M, "Default lz4 level.", LZ4_LEVEL),
    _k("compression.zstd.level", T.INT, 3, M, "Default zstd level.", ZSTD_LEVEL),
    _k("fetch.max.bytes", T.INT, 55 * 1024 * 1024, M, "Most bytes returned for one fetch request.", Range(1024)),
    _k("max.incremental.fetch.session.cache.slots", T.INT, 1000, M, "Incremental fetch sessions kept.", Range(0)),
    _k("max.request.partition.size.limit", T.INT, 2000, M,
       "Most partitions one DescribeTopicPartitions answer holds.", Range(1)),
    _k("authorizer.class.name", T.STRING, "", L,
       "Authorizer implementation: org.apache.kafka.metadata.authorizer.StandardAuthorizer (ACLs in the metadata "
       "log); empty disables authorization.", OneOf(("", STANDARD_AUTHORIZER))),
    _k("super.users", T.STRING, "", L,
       "Principals allowed everything whatever the ACLs say, separated by semicolons (User:admin;User:ops)."),
    _k("allow.everyone.if.no.acl.found", T.BOOLEAN, False, L,
       "Allow a request on a resource that has no ACL at all (otherwise only ACLs allow)."),
    _k("quota.window.num", T.INT, 11, L,
       "With quota.window.size.seconds: a client may use this many windows' worth of its quota at once.", Range(1)),
    _k("quota.window.size.seconds", T.INT, 1, L, "The time one quota window covers.", Range(1)),
    _k("metrics.port", T.INT, METRICS_PORT_DEFAULT, L,
       "klamm: port of the Prometheus metrics endpoint; -1 disables it, 0 picks a free port.", Range(-1, 65535)),
    _k("metrics.host", T.STRING, "127.0.0.1", L, "klamm: address the metrics endpoint binds to."),
]

_SOCKET = [
    _k("listeners", T.LIST, list(DEFAULT_LISTENERS), H, "URIs to listen on, as NAME://host:port.",
       kafka_default=["PLAINTEXT://:9092"]),
    _k("advertised.listeners", T.LIST, None, H, "Addresses published to clients; defaults to listeners.", derived=True),
    _k("listener.security.protocol.map", T.STRING, PROTOCOL_MAP_DEFAULT, L, "Listener name to security protocol map."),
    # TLS of the client listener (klamm.broker.tls): PEM stores (KIP-651), as files or inline
    _k("ssl.keystore.type", T.STRING, "JKS", M, "Format of the key store: PEM or PKCS12 (JKS is Java's own format).",
       OneOf(("JKS", "PKCS12", "PEM"), case_insensitive=True)),
    _k("ssl.keystore.location", T.STRING, None, H,
       "Key store file: with ssl.keystore.type=PEM, the private key and the certificate chain in one PEM file."),
    _k("ssl.keystore.password", T.PASSWORD, None, H, "Password of the key store file (an encrypted PEM key)."),
    _k("ssl.key.password", T.PASSWORD, None, H, "Password of the private key (an encrypted PEM key)."),
    _k("ssl.keystore.key", T.PASSWORD, None, H, "The private key in PEM, inline (with ssl.keystore.type=PEM)."),
    _k("ssl.keystore.certificate.chain", T.PASSWORD, None, H,
       "The certificate chain in PEM, inline (with ssl.keystore.type=PEM)."),
    _k("ssl.truststore.type", T.STRING, "JKS", M, "Format of the trust store: PEM or PKCS12.",
       OneOf(("JKS", "PKCS12", "PEM"), case_insensitive=True)),
    _k("ssl.truststore.location", T.STRING, None, H, "Trust store file: with PEM, the trusted CA certificates."),
    _k("ssl.truststore.password", T.PASSWORD, None, H, "Password of the trust store (not used by PEM stores)."),
    _k("ssl.truststore.certificates", T.PASSWORD, None, H, "The trusted certificates in PEM, inline."),
    _k("ssl.client.auth", T.STRING, "none", M,
       "Client certificates: required (mutual TLS), requested (verified when given) or none.",
       OneOf(("required", "requested", "none"))),
    _k("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"], M, "TLS versions the listener accepts.",
       OneOf(("TLSv1.2", "TLSv1.3"))),
    _k("ssl.protocol", T.STRING, "TLSv1.3", M, "The newest TLS version the listener negotiates.",
       OneOf(("TLSv1.2", "TLSv1.3", "TLS"))),
    _k("ssl.cipher.suites", T.LIST, [], L, "Cipher suites the listener allows; empty: the TLS library's defaults.",
       unsupported="cipher suites have Java (IANA) names that OpenSSL spells otherwise; the defaults apply"),
    _k("ssl.endpoint.identification.algorithm", T.STRING, "https", L,
       "How a broker checks the certificate of another broker or controller it connects to: https checks that "
       "the certificate names the host; empty checks only that a trusted CA signed it."),
    _k("ssl.principal.mapping.rules", T.STRING, "DEFAULT", L,
       "Rules mapping a client certificate's distinguished name to a principal name: RULE:pattern/replacement/[LU] "
       "entries and DEFAULT (the whole name), the first that matches applies."),
    _k("inter.broker.listener.name", T.STRING, None, M,
       "Listener brokers reach each other on; defaults to the listener named after "
       "security.inter.broker.protocol."),
    _k("security.inter.broker.protocol", T.STRING, "PLAINTEXT", M,
       "Security protocol between brokers: names the inter-broker listener when inter.broker.listener.name "
       "is unset.", OneOf(SECURITY_PROTOCOLS)),
    _k("socket.send.buffer.bytes", T.INT, 100 * 1024, H, "SO_SNDBUF of server sockets; -1 uses the OS default."),
    _k("socket.receive.buffer.bytes", T.INT, 100 * 1024, H,
       "SO_RCVBUF of server sockets; -1 uses the OS default. A connection sending a request larger than it holds "
       "is given up to 1 MiB."),
    _k("socket.request.max.bytes", T.INT, 100 * 1024 * 1024, H, "Largest request size accepted.", Range(1)),
    _k("socket.listen.backlog.size", T.INT, 50, M, "Pending connection backlog.", Range(1)),
    _k("max.connections", T.INT, INT_MAX, M, "Connections allowed in total.", Range(0)),
    _k("max.connections.per.ip", T.INT, INT_MAX, M, "Connections allowed per client address.", Range(0)),
    _k("max.connections.per.ip.overrides", T.STRING, "", M, "Per-address overrides, as host:count pairs."),
    _k("connections.max.idle.ms", T.LONG, 10 * 60 * 1000, M, "Idle connections are closed after this long."),
    # SASL of the client listener (klamm.broker.authentication); listener.name.<listener>.<mechanism>.sasl.jaas.config
    # gives a mechanism's JAAS options (PLAIN's user_<name>="password" entries)
    _k("delegation.token.secret.key", T.PASSWORD, None, M,
       "The key delegation tokens' HMACs are made and checked with (KIP-48); every node of a cluster needs the "
       "same. Unset or empty, delegation tokens are off (DELEGATION_TOKEN_AUTH_DISABLED)."),
    _k("delegation.token.max.lifetime.ms", T.LONG, 7 * 24 * HOUR_MS, M,
       "The longest a delegation token lives, renewals included.", Range(1)),
    _k("delegation.token.expiry.time.ms", T.LONG, 24 * HOUR_MS, M,
       "How long a delegation token lives between renewals, unless the client asks for less.", Range(1)),
    _k("delegation.token.expiry.check.interval.ms", T.LONG, HOUR_MS, L,
       "How often the controller removes expired delegation tokens.", Range(1)),
    _k("sasl.enabled.mechanisms", T.LIST, ["GSSAPI"], M,
       "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI is Kerberos's)."),
    _k("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI", M,
       "SASL mechanism a broker authenticates to other brokers with on a SASL inter-broker listener: PLAIN or "
       "SCRAM-SHA-256/512, its credentials the username and password options of "
       "listener.name.<listener>.<mechanism>.sasl.jaas.config."),
    _k("sasl.mechanism.controller.protocol", T.STRING, "GSSAPI", M,
       "SASL mechanism brokers and controllers authenticate to controllers with on a SASL controller listener "
       "(as sasl.mechanism.inter.broker.protocol, for the first of controller.listener.names)."),
    _k("sasl.server.max.receive.size", T.INT, 524288, L,
       "Largest request a SASL listener reads before the client has authenticated.", Range(1)),
    _k("connections.max.reauth.ms", T.LONG, 0, M,
       "A SASL session lasts this long before the client must authenticate again (KIP-368); 0: for ever.",
       Range(0)),
    # OAUTHBEARER with listener.name.<l>.oauthbearer.sasl.server.callback.handler.class=
    # org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler (klamm.broker.authentication);
    # each may also be set as listener.name.<l>.oauthbearer.<key>
    _k("sasl.oauthbearer.jwks.endpoint.url", T.STRING, None, M,
       "The identity provider's JWKS (JSON Web Key Set) with the keys that sign OAUTHBEARER tokens: an http(s) URL, "
       "fetched in the background, or a file:// URL (klamm also takes a plain path), read at start-up."),
    _k("sasl.oauthbearer.jwks.endpoint.refresh.ms", T.LONG, 60 * 60 * 1000, L,
       "How often the JWKS is fetched again; a token naming an unknown key fetches it sooner (at most once a minute "
       "per key id).", Range(0)),
    _k("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", T.LONG, 100, L,
       "The first wait between attempts to fetch the JWKS; it doubles after each failed attempt.", Range(0)),
    _k("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", T.LONG, 10000, L,
       "How long a JWKS fetch keeps retrying before it gives up until the next one.", Range(0)),
    _k("sasl.oauthbearer.expected.audience", T.LIST, None, L,
       "Audiences a token's aud claim must name one of; unset, a token with an aud claim is refused (as jose4j)."),
    _k("sasl.oauthbearer.expected.issuer", T.STRING, None, L, "The iss claim a token must carry, if set."),
    _k("sasl.oauthbearer.sub.claim.name", T.STRING, "sub", L, "The claim naming the token's principal."),
    _k("sasl.oauthbearer.scope.claim.name", T.STRING, "scope", L, "The claim holding the token's scope."),
    _k("sasl.oauthbearer.clock.skew.seconds", T.INT, 30, L,
       "Seconds of difference allowed between the identity provider's clock and the broker's (exp, nbf)."),
]

_LOG = [
    _k("num.partitions", T.INT, 1, M, "Default partition count for new topics.", Range(1)),
    _k("log.dir", T.STRING, DEFAULT_LOG_DIR, H, "Data directory, used when log.dirs is not set.",
       kafka_default="/tmp/kafka-logs"),
    _k("log.dirs", T.LIST, None, H, "Data directories; defaults to log.dir.", derived=True),
    _k("log.segment.bytes", T.INT, SEGMENT_BYTES_DEFAULT, H, "Size at which a segment is rolled.", Range(SEGMENT_BYTES_MIN)),
    _k("log.roll.ms", T.LONG, None, H, "Segment roll age in ms; defaults to log.roll.hours.", derived=True),
    _k("log.roll.hours", T.INT, 168, H, "Segment roll age in hours, used when log.roll.ms is not set.", Range(1)),
    _k("log.roll.jitter.ms", T.LONG, None, H, "Roll jitter in ms; defaults to log.roll.jitter.hours.", derived=True,
       unsupported=_JITTER, accepts=(0,)),
    _k("log.roll.jitter.hours", T.INT, 0, H, "Roll jitter in hours, used when log.roll.jitter.ms is not set.", Range(0),
       unsupported=_JITTER),
    _k("log.retention.ms", T.LONG, None, H,
       "Retention time in ms; defaults to log.retention.minutes, then log.retention.hours; -1 is unlimited.", derived=True),
    _k("log.retention.minutes", T.INT, None, H, "Retention time in minutes, used when log.retention.ms is not set."),
    _k("log.retention.hours", T.INT, 168, H, "Retention time in hours, the last fallback for retention."),
    _k("log.retention.bytes", T.LONG, -1, H, "Largest partition size before deletion; -1 is unlimited."),
    _k("log.retention.check.interval.ms", T.LONG, 5 * 60 * 1000, M, "How often retention is enforced.", Range(1)),
    _k("log.cleanup.policy", T.LIST, ["delete"], M, "Default cleanup policy: delete, compact, or both.",
       OneOf(CLEANUP_POLICIES)),
    _k("log.cleaner.enable", T.BOOLEAN, True, M, "Run the log cleaner (needed for compacted topics)."),
    _k("log.cleaner.threads", T.INT, 1, M, "Log cleaner threads.", Range(0)),
    _k("log.cleaner.io.max.bytes.per.second", T.DOUBLE, DOUBLE_MAX, M, "Cleaner I/O throttle."),
    _k("log.cleaner.dedupe.buffer.size", T.LONG, 128 * 1024 * 1024, M, "Cleaner deduplication memory."),
    _k("log.cleaner.io.buffer.size", T.INT, 512 * 1024, M, "Cleaner I/O buffer memory.", Range(0),
       unsupported="the cleaner reads and writes whole batches; it has no fixed I/O buffer"),
    _k("log.cleaner.io.buffer.load.factor", T.DOUBLE, 0.9, M, "Cleaner dedupe hash table load factor."),
    _k("log.cleaner.backoff.ms", T.LONG, 15 * 1000, M, "Cleaner sleep when there is nothing to clean.", Range(0)),
    _k("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, M, "Default dirty ratio that triggers compaction.", Range(0, 1)),
    _k("log.cleaner.delete.retention.ms", T.LONG, 24 * HOUR_MS, M, "Default tombstone retention.", Range(0)),
    _k("log.cleaner.min.compaction.lag.ms", T.LONG, 0, M, "Default minimum compaction lag.", Range(0)),
    _k("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX, M, "Default maximum compaction lag.", Range(1)),
    _k("log.index.size.max.bytes", T.INT, 10 * 1024 * 1024, M, "Maximum offset index size.", Range(4)),
    _k("log.index.interval.bytes", T.INT, 4096, M, "Bytes between offset index entries.", Range(0)),
    _k("log.flush.interval.messages", T.LONG, LONG_MAX, H, "Messages between forced fsyncs.", Range(1)),
    _k("log.segment.delete.delay.ms", T.LONG, 60000, H, "Delay before deleted segment files are removed.", Range(0)),
    _k("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX, H, "How often the flusher checks for logs to fsync."),
    _k("log.flush.interval.ms", T.LONG, None, H, "Max age of unflushed data; defaults to log.flush.scheduler.interval.ms.",
       derived=True),
    # The metadata log (klamm/controller): snapshots and what is kept behind them (Kafka's defaults).
    _k("metadata.log.max.record.bytes.between.snapshots", T.LONG, 20 * 1024 * 1024, H,
       "Bytes of metadata records appended since the last snapshot that trigger a new one.", Range(1)),
    _k("metadata.log.max.snapshot.interval.ms", T.LONG, HOUR_MS, H,
       "Time after which new metadata records trigger a snapshot; 0 disables the time trigger.", Range(0)),
    _k("metadata.max.retention.bytes", T.LONG, 100 * 1024 * 1024, H,
       "Metadata log plus snapshot bytes kept before the oldest snapshot and the log behind it go; -1 unlimited."),
    _k("metadata.max.retention.ms", T.LONG, 7 * 24 * HOUR_MS, H,
       "Age of the oldest snapshot after which it and the log behind the next one go; -1 unlimited."),
    _k("metadata.log.segment.bytes", T.INT, 1024 * 1024 * 1024, H, "Segment size of the metadata log.", Range(14)),
    _k("log.flush.offset.checkpoint.interval.ms", T.INT, 60000, H, "How often the recovery point is checkpointed.", Range(0)),
    _k("log.flush.start.offset.checkpoint.interval.ms", T.INT, 60000, H, "How often log start offsets are checkpointed.",
       Range(0),
       unsupported="log start offsets are checkpointed with the recovery points "
                   "(log.flush.offset.checkpoint.interval.ms)"),
    _k("log.preallocate", T.BOOLEAN, False, M, "Preallocate segment files.",
       unsupported="segment files are not preallocated"),
    _k("log.message.timestamp.type", T.STRING, "CreateTime", M, "Default timestamp type of topics.", OneOf(TIMESTAMP_TYPES)),
    _k("log.message.downconversion.enable", T.BOOLEAN, True, M,
       "Default of topics' message.downconversion.enable (Kafka 3.x)."),
    _k("log.message.timestamp.before.max.ms", T.LONG, LONG_MAX, M, "Default allowed age of CreateTime timestamps.", Range(0)),
    _k("log.message.timestamp.after.max.ms", T.LONG, HOUR_MS, M, "Default allowed future skew of CreateTime timestamps.",
       Range(0)),
    _k("log.local.retention.ms", T.LONG, -2, M, "Default local retention time with tiered storage; -2 follows retention.",
       Range(-2),
       unsupported=_TIERED),
    _k("log.local.retention.bytes", T.LONG, -2, M, "Default local retention size with tiered storage; -2 follows retention.",
       Range(-2),
       unsupported=_TIERED),
    _k("num.recovery.threads.per.data.dir", T.INT, 2, H, "Threads per data directory for recovery and shutdown flush.",
       Range(1),
       unsupported="log recovery and shutdown run on one thread", accepts=(1,)),
    _k("min.insync.replicas", T.INT, 1, H, "Default min in-sync replicas for acks=all.", Range(1)),
    _k("create.topic.policy.class.name", T.CLASS, None, L, "CreateTopics policy class.",
       unsupported=_NO_POLICY, accepts=("",)),
    _k("alter.config.policy.class.name", T.CLASS, None, L, "AlterConfigs policy class.",
       unsupported=_NO_POLICY, accepts=("",)),
]

_REPLICATION = [
    _k("default.replication.factor", T.INT, 1, M, "Default replication factor for new topics."),
    _k("unclean.leader.election.enable", T.BOOLEAN, False, H, "Allow out-of-sync replicas to become leader."),
    _k("replica.lag.time.max.ms", T.LONG, 30000, H, "A follower this far behind is dropped from the ISR."),
    _k("replica.selector.class", T.STRING, None, M,
       "The ReplicaSelector naming a consumer's preferred read replica (KIP-392): "
       "org.apache.kafka.common.replica.RackAwareReplicaSelector sends a consumer with client.rack to a replica "
       "in its rack; unset, every consumer reads from the leader.", OneOf((RACK_AWARE_SELECTOR,))),
    _k("replica.fetch.max.bytes", T.INT, 1024 * 1024, M, "Bytes a follower fetches per partition.", Range(0),
       cluster=_NO_FOLLOWERS),
    _k("replica.fetch.wait.max.ms", T.INT, 500, M, "Max wait of a follower fetch.",
       cluster=_NO_FOLLOWERS),
    _k("replica.fetch.min.bytes", T.INT, 1, H, "Min bytes for a follower fetch response.",
       cluster=_NO_FOLLOWERS),
    _k("replica.fetch.response.max.bytes", T.INT, 10 * 1024 * 1024, M, "Bytes per follower fetch response.", Range(0),
       cluster=_NO_FOLLOWERS),
    _k("replica.fetch.backoff.ms", T.INT, 1000, M, "Sleep after a follower fetch error.", Range(0),
       cluster=_NO_FOLLOWERS),
    _k("replica.socket.timeout.ms", T.INT, 30000, H, "Follower socket timeout.",
       cluster=_NO_FOLLOWERS),
    _k("replica.socket.receive.buffer.bytes", T.INT, 64 * 1024, H, "Follower socket receive buffer.",
       cluster=_NO_FOLLOWERS),
    _k("num.replica.fetchers", T.INT, 1, H, "Follower fetcher threads per source broker.",
       cluster=_NO_FOLLOWERS),
    _k("replica.high.watermark.checkpoint.interval.ms", T.LONG, 5000, H, "How often high watermarks are saved.",
       cluster="the high watermark of a single replica is its log end offset, recovered from the log"),
    _k("auto.leader.rebalance.enable", T.BOOLEAN, True, H, "Move leadership back to preferred replicas."),
    _k("leader.imbalance.check.interval.seconds", T.LONG, 300, H, "How often leader balance is checked.", Range(1)),
    _k("leader.imbalance.per.broker.percentage", T.INT, 10, H, "Tolerated leader imbalance per broker, in percent.",
       cluster="Kafka's KRaft controller does not use it: it balances every partition whose preferred replica can lead"),
]

_GROUPS = [
    _k("offsets.topic.num.partitions", T.INT, 50, H, "Partitions of __consumer_offsets (fixed after creation).", Range(1)),
    _k("offsets.topic.replication.factor", T.SHORT, 3, H,
       "Replication factor of __consumer_offsets; creation waits until this many brokers exist.", Range(1),
       cluster=_INTERNAL_RF),
    _k("offsets.topic.segment.bytes", T.INT, 100 * 1024 * 1024, H, "Segment size of __consumer_offsets.", Range(1)),
    _k("offsets.topic.compression.codec", T.INT, 0, H, "Compression codec id for __consumer_offsets.",
       unsupported="coordinator records are written uncompressed"),
    _k("offsets.load.buffer.size", T.INT, 5 * 1024 * 1024, H, "Read batch size when loading offsets.", Range(1),
       unsupported=_LOAD_BUFFER),
    _k("offsets.retention.minutes", T.INT, 7 * 24 * 60, H, "Committed offsets of empty groups expire after this long.",
       Range(1)),
    _k("offsets.retention.check.interval.ms", T.LONG, 600000, H, "How often stale offsets are looked for.", Range(1)),
    _k("offsets.commit.timeout.ms", T.INT, 5000, H, "Max wait for an offset commit to be replicated.", Range(1)),
    _k("offset.metadata.max.bytes", T.INT, 4096, H, "Max size of offset commit metadata."),
    _k("group.initial.rebalance.delay.ms", T.INT, 3000, M, "Wait for more members before a new group's first rebalance."),
    _k("group.min.session.timeout.ms", T.INT, 6000, M, "Smallest session timeout a member may ask for."),
    _k("group.max.session.timeout.ms", T.INT, 1800000, M, "Largest session timeout a member may ask for."),
    _k("group.max.size", T.INT, INT_MAX, M, "Members allowed in one classic group.", Range(1)),
    _k("group.coordinator.rebalance.protocols", T.LIST, ["classic", "consumer"], M, "Enabled group protocols.",
       OneOf(("classic", "consumer", "share", "streams")),
       unsupported="share and streams groups are not implemented", accepts=(["classic"],)),
    _k("group.consumer.session.timeout.ms", T.INT, 45000, M,
       "A consumer-protocol member that sends no heartbeat for this long is removed from its group.", Range(1)),
    _k("group.consumer.heartbeat.interval.ms", T.INT, 5000, M,
       "How often consumer-protocol members are told to heartbeat.", Range(1)),
    _k("group.consumer.assignors", T.LIST, ["uniform", "range"], M,
       "Server-side assignors of consumer-protocol groups; the first is the default when members ask for none.",
       OneOf(("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
              "org.apache.kafka.coordinator.group.assignor.RangeAssignor"))),
    _k("group.consumer.max.size", T.INT, INT_MAX, M, "Members allowed in one consumer-protocol group.", Range(1)),
    _k("group.consumer.min.session.timeout.ms", T.INT, 45000, M,
       "Smallest group.consumer.session.timeout.ms allowed.", Range(1)),
    _k("group.consumer.max.session.timeout.ms", T.INT, 60000, M,
       "Largest group.consumer.session.timeout.ms allowed.", Range(1)),
    _k("group.consumer.min.heartbeat.interval.ms", T.INT, 5000, M,
       "Smallest group.consumer.heartbeat.interval.ms allowed.", Range(1)),
    _k("group.consumer.max.heartbeat.interval.ms", T.INT, 15000, M,
       "Largest group.consumer.heartbeat.interval.ms allowed.", Range(1)),
    _k("group.consumer.migration.policy", T.STRING, "bidirectional", M,
       "Online conversion of non-empty groups: classic to consumer (upgrade), back (downgrade), both "
       "(bidirectional) or neither (disabled).",
       OneOf(("disabled", "upgrade", "downgrade", "bidirectional"), case_insensitive=True), internal=True),
]


def check_consumer_group_bounds(values: dict[str, object]) -> None:
    """Kafka's GroupCoordinatorConfig checks: the consumer-protocol session and heartbeat within their bounds."""
    def value(name: str) -> int:
        return int(values[f"group.consumer.{name}"])  # type: ignore[call-overload]

    rules = [("max.heartbeat.interval.ms", ">=", "min.heartbeat.interval.ms"),
             ("heartbeat.interval.ms", ">=", "min.heartbeat.interval.ms"),
             ("heartbeat.interval.ms", "<=", "max.heartbeat.interval.ms"),
             ("max.session.timeout.ms", ">=", "min.session.timeout.ms"),
             ("session.timeout.ms", ">=", "min.session.timeout.ms"),
             ("session.timeout.ms", "<=", "max.session.timeout.ms"),
             ("heartbeat.interval.ms", "<", "session.timeout.ms")]
    words = {">=": "greater than or equal to", "<=": "less than or equal to", "<": "less than"}
    for left, op, right in rules:
        a, b = value(left), value(right)
        if not (a >= b if op == ">=" else a <= b if op == "<=" else a < b):
            raise ConfigError(f"group.consumer.{left}", a,
                              f"group.consumer.{left} must be {words[op]} group.consumer.{right}")

_TRANSACTIONS = [
    _k("transaction.state.log.num.partitions", T.INT, 50, H, "Partitions of __transaction_state.", Range(1)),
    _k("transaction.state.log.replication.factor", T.SHORT, 3, H, "Replication factor of __transaction_state.", Range(1),
       cluster=_INTERNAL_RF),
    _k("transaction.state.log.min.isr", T.INT, 2, H, "min.insync.replicas of __transaction_state.", Range(1),
       cluster="min.insync.replicas of __transaction_state, which has one replica on a single node"),
    _k("transaction.state.log.segment.bytes", T.INT, 100 * 1024 * 1024, H, "Segment size of __transaction_state.", Range(1)),
    _k("transaction.state.log.load.buffer.size", T.INT, 5 * 1024 * 1024, H, "Read batch size when loading transactions.",
       Range(1),
       unsupported=_LOAD_BUFFER),
    _k("transactional.id.expiration.ms", T.INT, 7 * 24 * HOUR_MS, H, "Idle transactional ids expire after this long.",
       Range(1)),
    _k("transaction.max.timeout.ms", T.INT, 15 * 60 * 1000, H, "Largest transaction timeout a producer may ask for.",
       Range(1)),
    _k("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10000, L,
       "klamm: the longest backoff between retries of a timed-out transaction's abort (each transaction is "
       "aborted by its own timer when its timeout passes).", Range(1)),
    _k("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, HOUR_MS, L,
       "How often expired transactional ids are removed.", Range(1)),
    _k("transaction.partition.verification.enable", T.BOOLEAN, True, L,
       "Check a partition was added to the transaction before accepting transactional writes."),
    _k("producer.id.expiration.ms", T.INT, 86400000, L, "Idle producer ids expire from partitions after this long.",
       Range(1)),
    _k("producer.id.expiration.check.interval.ms", T.INT, 600000, L, "How often producer ids are expired.", Range(1),
       internal=True),
]

BROKER_CONFIG_DEF = ConfigDef(_GENERAL + _SOCKET + _LOG + _REPLICATION + _GROUPS + _TRANSACTIONS)
