"""Broker registration decisions (Kafka's ClusterControlManager, single-node subset).

A broker registers its endpoints (one per advertised client listener) at every
start; a RegisterBrokerRecord is only written when nothing is registered for the
node yet or when what it registers differs (endpoints, rack, fencing). The broker epoch is the offset the record
will get, as in Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from klamm.controller.image import BrokerRegistration, Endpoint, MetadataImage
from klamm.controller.records import MetadataRecord

__all__ = ["SECURITY_PROTOCOLS", "decide_register_broker"]

# SecurityProtocol ids (org.apache.kafka.common.security.auth.SecurityProtocol).
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def decide_register_broker(
    image: MetadataImage, node_id: int, host: str, port: int, listener: str = "PLAINTEXT",
    rack: str | None = None, *, security_protocol: int | None = None, incarnation_id: uuid.UUID | None = None,
    fenced: bool = False, endpoints: Sequence[Endpoint] | None = None,
) -> list[MetadataRecord]:
    """Records registering the broker, or [] when the image already says exactly that.

    A broker of another process registers fenced (Kafka's rule): its heartbeats unfence it once it has
    caught up with the metadata. The combined node's own broker registers unfenced.
    `endpoints`: every listener (the first is the inter-broker one); without them, host/port/listener.
    """
    if security_protocol is None:
        security_protocol = SECURITY_PROTOCOLS.get(listener.upper(), 0)
    if not endpoints:
        endpoints = [Endpoint(listener, host, port, security_protocol)]
    current = image.brokers.get(node_id)
    if not fenced and current is not None and _same_registration(current, tuple(endpoints), rack):
        return []
    return [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": node_id,
        "incarnation_id": incarnation_id or uuid.uuid4(),
        "broker_epoch": image.offset + 1,
        "end_points": [{"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                       for e in endpoints],
        "features": [],
        "rack": rack,
        "fenced": fenced,
    })]


def _same_registration(current: BrokerRegistration, endpoints: tuple[Endpoint, ...], rack: str | None) -> bool:
    return (not current.fenced and not current.in_controlled_shutdown and current.endpoints == endpoints
            and current.rack == rack)
