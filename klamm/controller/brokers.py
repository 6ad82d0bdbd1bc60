"""Broker registration decisions (Kafka's ClusterControlManager, single-node subset).

A broker registers its endpoint at every start; a RegisterBrokerRecord is only
written when nothing is registered for the node yet or when what it registers
differs (endpoint, rack, fencing). The broker epoch is the offset the record
will get, as in Kafka.
"""

from __future__ import annotations

import uuid

from klamm.controller.image import BrokerRegistration, MetadataImage
from klamm.controller.records import MetadataRecord

__all__ = ["SECURITY_PROTOCOLS", "decide_register_broker", "decide_unregister_broker"]

# SecurityProtocol ids (org.apache.kafka.common.security.auth.SecurityProtocol).
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def decide_register_broker(
    image: MetadataImage, node_id: int, host: str, port: int, listener: str = "PLAINTEXT",
    rack: str | None = None, *, security_protocol: int | None = None, incarnation_id: uuid.UUID | None = None,
    fenced: bool = False,
) -> list[MetadataRecord]:
    """Records registering the broker, or [] when the image already says exactly that.

    A broker of another process registers fenced (Kafka's rule): its heartbeats unfence it once it has
    caught up with the metadata. The combined node's own broker registers unfenced.
    """
    if security_protocol is None:
        security_protocol = SECURITY_PROTOCOLS.get(listener.upper(), 0)
    current = image.brokers.get(node_id)
    if not fenced and current is not None and _same_registration(current, host, port, listener, rack,
                                                                 security_protocol):
        return []
    return [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": node_id,
        "incarnation_id": incarnation_id or uuid.uuid4(),
        "broker_epoch": image.offset + 1,
        "end_points": [{"name": listener, "host": host, "port": port, "security_protocol": security_protocol}],
        "features": [],
        "rack": rack,
        "fenced": fenced,
    })]


def _same_registration(current: BrokerRegistration, host: str, port: int, listener: str, rack: str | None,
                       security_protocol: int) -> bool:
    return (not current.fenced and not current.in_controlled_shutdown and current.host == host and current.port == port and current.listener == listener
            and current.rack == rack and current.security_protocol == security_protocol)


def decide_unregister_broker(image: MetadataImage, node_id: int) -> list[MetadataRecord]:
    current = image.brokers.get(node_id)
    if current is None:
        return []
    return [MetadataRecord("UnregisterBrokerRecord", {"broker_id": node_id, "broker_epoch": current.epoch})]
