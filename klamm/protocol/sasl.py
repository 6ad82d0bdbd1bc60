"""SASL mechanisms as sans-io server state machines (PLAIN, SCRAM-SHA-256/512).

The broker feeds each SaslAuthenticate token to a mechanism and sends back what it
returns; the mechanism never touches a socket or the credential store (it asks a
lookup function).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SCRAM_MECHANISMS", "ScramCredential"]

# Kafka's ScramMechanism codes (AlterUserScramCredentials, UserScramCredentialRecord)
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps of a SCRAM password (RFC 5802): never the password itself."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int
