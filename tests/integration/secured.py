"""A broker with SASL PLAIN users and the StandardAuthorizer, for the authorization tests.

Users: admin (a super user), alice, bob (passwords "<name>-secret"). Every client connects as one of
them; `grant` creates ACLs as admin through CreateAcls.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, \
    ResourceType

from tests.integration.conftest import BrokerThread, RawClient

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
USERS = ("admin", "alice", "bob")
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{u}-secret"' for u in USERS) + ";")


def secured_broker(broker_factory: Any, **overrides: str) -> BrokerThread:
    """A SASL_PLAINTEXT broker (PLAIN) with the StandardAuthorizer; User:admin is a super user."""
    return broker_factory(**{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
                             "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
                             "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
                             **overrides})


def conf(broker: BrokerThread, user: str) -> dict[str, str]:
    """librdkafka settings to connect as `user`."""
    return {"bootstrap.servers": f"127.0.0.1:{broker.port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"}


def kafka_python_conf(broker: BrokerThread, user: str) -> dict[str, Any]:
    return {"bootstrap_servers": f"127.0.0.1:{broker.port}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": user, "sasl_plain_password": f"{user}-secret"}


def acl(user: str, resource: ResourceType, name: str, operation: AclOperation,
        permission: AclPermissionType = AclPermissionType.ALLOW,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(resource, name, pattern, f"User:{user}", host, operation, permission)


def grant(broker: BrokerThread, *bindings: AclBinding) -> None:
    """Create ACLs as the super user, and wait until they are in force."""
    admin = AdminClient(conf(broker, "admin"))
    for future in admin.create_acls(list(bindings)).values():
        future.result(10)


def sasl_client(broker: BrokerThread, user: str) -> RawClient:
    """A RawClient authenticated with SASL PLAIN (SaslHandshake v1, then SaslAuthenticate v2) as `user`."""
    client = broker.connect()
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0%s\0%s-secret" % (user.encode(), user.encode())})
    assert answer.error_code == 0, answer
    return client
