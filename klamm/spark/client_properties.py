"""Spark's `kafka.*` options name Java client properties; confluent-kafka (librdkafka) takes its own.

Most names are shared and pass as they are. A pipeline moved from Spark's Kafka source
also carries Java-only ones: those with a librdkafka counterpart are translated
(renamed, or rewritten like `sasl.jaas.config`), those that only tune the Java client
(`max.poll.records`, `default.api.timeout.ms`, ...) are dropped, as they change nothing
a librdkafka client could do. A Java-only setting that would change what the client
does but has no counterpart here (a JKS truststore, a custom login module) is refused
with the reason, never silently ignored. Names not listed pass through: librdkafka
refuses what it does not know, by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Java name -> librdkafka name, same value.
_RENAMED = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "max.request.size": "message.max.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}
# Java client tuning without a librdkafka counterpart: nothing to carry over.
_JAVA_ONLY = frozenset({
    "max.poll.records", "default.api.timeout.ms", "client.dns.lookup", "exclude.internal.topics",
    "metric.reporters", "metrics.num.samples", "metrics.recording.level", "metrics.sample.window.ms",
    "auto.include.jmx.reporter", "internal.leave.group.on.close", "security.providers",
    "ssl.truststore.type", "ssl.keystore.type",  # consumed with the locations below
})
_ASSIGNORS = {"org.apache.kafka.clients.consumer.RangeAssignor": "range",
              "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
              "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky"}
_LOGIN_MODULES = ("org.apache.kafka.common.security.plain.PlainLoginModule",
                  "org.apache.kafka.common.security.scram.ScramLoginModule")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class UnsupportedProperty(ValueError):
    """A Java client property that changes behaviour and has no librdkafka counterpart."""


def librdkafka_properties(java: Mapping[str, str]) -> dict[str, str]:
    """The confluent-kafka configuration for Spark's `kafka.*` options (prefix already removed)."""
    out: dict[str, str] = {}
    for name, value in java.items():
        if name in _JAVA_ONLY:
            continue
        if name == "sasl.jaas.config":
            out.update(_jaas(value))
        elif name == "buffer.memory":
            out["queue.buffering.max.kbytes"] = str(max(1, int(value) // 1024))
        elif name == "partition.assignment.strategy":
            out[name] = ",".join(_ASSIGNORS.get(a.strip(), a.strip()) for a in value.split(","))
        elif name == "ssl.endpoint.identification.algorithm":
            out[name] = value or "none"  # Java's empty value switches the check off
        elif name == "ssl.truststore.location":
            out.update(_truststore(java, value))
        elif name == "ssl.truststore.password" and java.get("ssl.truststore.type", "JKS").upper() == "PEM":
            continue
        elif name == "ssl.keystore.location":
            out.update(_keystore(java, value))
        else:
            out[_RENAMED.get(name, name)] = value
    return out


def _jaas(config: str) -> dict[str, str]:
    module = config.strip().split(None, 1)[0] if config.strip() else ""
    if module not in _LOGIN_MODULES:
        raise UnsupportedProperty(f"kafka.sasl.jaas.config: login module {module!r} has no librdkafka counterpart "
                                  "(PlainLoginModule and ScramLoginModule are translated; for OAUTHBEARER set "
                                  "kafka.sasl.oauthbearer.* properties)")
    options = {key: re.sub(r"\\(.)", r"\1", value) for key, value in _JAAS_OPTION.findall(config)}
    if "username" not in options or "password" not in options:
        raise UnsupportedProperty("kafka.sasl.jaas.config: username and password are required")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def _truststore(java: Mapping[str, str], location: str) -> dict[str, str]:
    kind = java.get("ssl.truststore.type", "JKS").upper()
    if kind == "PEM":
        return {"ssl.ca.location": location}
    raise UnsupportedProperty(f"kafka.ssl.truststore.location: a {kind} truststore cannot be read by librdkafka; "
                              "give the CA certificates as PEM (kafka.ssl.truststore.type=PEM, or kafka.ssl.ca.location)")


def _keystore(java: Mapping[str, str], location: str) -> dict[str, str]:
    kind = java.get("ssl.keystore.type", "JKS").upper()
    if kind == "PKCS12":
        return {"ssl.keystore.location": location}
    if kind == "PEM":  # KIP-651: the private key and the certificate chain in one file
        return {"ssl.certificate.location": location, "ssl.key.location": location}
    raise UnsupportedProperty(f"kafka.ssl.keystore.location: a {kind} keystore cannot be read by librdkafka; "
                              "use PKCS12 or PEM (kafka.ssl.keystore.type)")
