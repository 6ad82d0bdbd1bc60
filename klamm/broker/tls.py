"""The TLS contexts of SSL listeners, from Kafka's ssl.* broker configs: a listener's, and a node's own when it
connects to another node's listener.

Stores are PEM, as KIP-651 defines them for Kafka, or PKCS12. A PEM key store is one file
holding the private key and its certificate chain (ssl.keystore.location), or both inline
(ssl.keystore.key, ssl.keystore.certificate.chain); a PEM trust store is a file of CA
certificates (ssl.truststore.location) or inline (ssl.truststore.certificates). A PKCS12
store (ssl.keystore.type / ssl.truststore.type = PKCS12) is read with its password and handed
to OpenSSL as PEM. JKS is Java's own format and is refused with the reason.
ssl.client.auth=required makes it mutual TLS; requested verifies a certificate when the
client offers one.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any

from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    """A server-side SSLContext; ConfigError when the stores are missing, unreadable or not PEM."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _allow_versions(context, config)
    _load_key_store(context, config)
    context.verify_mode = _CLIENT_AUTH[config.ssl_client_auth]
    if _load_trust_store(context, config) is False and context.verify_mode != ssl.CERT_NONE:
        raise ConfigError("ssl.client.auth", config.ssl_client_auth,
                          "client certificates need a trust store (ssl.truststore.location or "
                          "ssl.truststore.certificates) to verify them against")
    return context


def client_context(config: BrokerConfig) -> ssl.SSLContext:
    """The TLS context a node connects to another's SSL or SASL_SSL listener with (inter-broker, controller):
    the trust store verifies the other node (the system's CAs without one), the key store, if any, is the
    client certificate mutual TLS asks for, and ssl.endpoint.identification.algorithm=https checks the host name."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _allow_versions(context, config)
    if config.ssl_keystore_location is not None or config.ssl_keystore_key is not None:
        _load_key_store(context, config)
    if not _load_trust_store(context, config):
        context.load_default_certs()
    algorithm = (config.ssl_endpoint_identification_algorithm or "").strip().lower()
    if algorithm not in ("", "https"):
        raise ConfigError("ssl.endpoint.identification.algorithm", algorithm, "klamm checks host names with "
                          "https, or not at all (empty)")
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _allow_versions(context: ssl.SSLContext, config: BrokerConfig) -> None:
    newest = _VERSIONS.get(config.ssl_protocol)  # None for "TLS": the newest there is
    allowed = sorted((_VERSIONS[p] for p in config.ssl_enabled_protocols
                      if newest is None or _VERSIONS[p].value <= newest.value), key=lambda v: v.value)
    if not allowed:
        raise ConfigError("ssl.enabled.protocols", ",".join(config.ssl_enabled_protocols),
                          f"no enabled TLS version is allowed by ssl.protocol={config.ssl_protocol}")
    context.minimum_version, context.maximum_version = allowed[0], allowed[-1]


def _secret(value: Any) -> str | None:
    return None if value is None else value.get_secret_value()


def _load_key_store(context: ssl.SSLContext, config: BrokerConfig) -> None:
    location, key, chain = config.ssl_keystore_location, _secret(config.ssl_keystore_key), \
        _secret(config.ssl_keystore_certificate_chain)
    if location is None and key is None:
        raise ConfigError("ssl.keystore.location", "", "an SSL listener needs a key store: ssl.keystore.location, "
                          "or ssl.keystore.key with ssl.keystore.certificate.chain")
    store_type = config.ssl_keystore_type.upper()
    if store_type not in ("PEM", "PKCS12"):
        raise ConfigError("ssl.keystore.type", config.ssl_keystore_type,
                          "klamm reads PEM (KIP-651) and PKCS12 key stores; convert a JKS store with keytool "
                          "-importkeystore -deststoretype PKCS12")
    password = _secret(config.ssl_key_password) or _secret(config.ssl_keystore_password)
    try:
        if store_type == "PKCS12":
            key, chain = _pkcs12_key_store(location, _secret(config.ssl_keystore_password))
            with _pem_file(chain + "\n" + key) as path:
                context.load_cert_chain(path)
        elif key is not None:
            if chain is None:
                raise ConfigError("ssl.keystore.certificate.chain", "", "ssl.keystore.key needs the certificate chain")
            with _pem_file(chain + "\n" + key) as path:
                context.load_cert_chain(path, password=password)
        else:
            context.load_cert_chain(location, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("ssl.keystore.location" if key is None else "ssl.keystore.key", location or "(inline)",
                          f"the key store could not be loaded: {exc}") from None


def _load_trust_store(context: ssl.SSLContext, config: BrokerConfig) -> bool:
    location, inline = config.ssl_truststore_location, _secret(config.ssl_truststore_certificates)
    if location is None and inline is None:
        return False
    store_type = config.ssl_truststore_type.upper()
    if store_type not in ("PEM", "PKCS12"):
        raise ConfigError("ssl.truststore.type", config.ssl_truststore_type,
                          "klamm reads PEM (KIP-651) and PKCS12 trust stores; convert a JKS store with keytool "
                          "-importkeystore -deststoretype PKCS12")
    if store_type == "PEM" and config.ssl_truststore_password is not None:  # as Kafka: PEM has no password
        raise ConfigError("ssl.truststore.password", "[hidden]", "a PEM trust store takes no password")
    try:
        if store_type == "PKCS12":
            context.load_verify_locations(cadata=_pkcs12_certificates(location, _secret(config.ssl_truststore_password)))
        elif inline is not None:
            context.load_verify_locations(cadata=inline)
        else:
            context.load_verify_locations(cafile=location)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("ssl.truststore.location" if inline is None else "ssl.truststore.certificates",
                          location or "(inline)", f"the trust store could not be loaded: {exc}") from None
    return True


def _pkcs12_key_store(location: str | None, password: str | None) -> tuple[str, str]:
    """The private key and certificate chain of a PKCS12 key store, as PEM text."""
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    if location is None:
        raise ConfigError("ssl.keystore.location", "", "a PKCS12 key store is a file: set ssl.keystore.location")
    with open(location, "rb") as store:
        data = store.read()
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError("ssl.keystore.password", "[hidden]", f"the PKCS12 key store could not be opened: {exc}")
    if key is None or cert is None:
        raise ConfigError("ssl.keystore.location", location, "the PKCS12 key store holds no private key entry")
    chain = "".join(c.public_bytes(Encoding.PEM).decode() for c in (cert, *extra))
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode(), chain


def _pkcs12_certificates(location: str | None, password: str | None) -> str:
    """The trusted certificates of a PKCS12 trust store, as PEM text."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    if location is None:
        raise ConfigError("ssl.truststore.location", "", "a PKCS12 trust store is a file: set ssl.truststore.location")
    with open(location, "rb") as store:
        data = store.read()
    try:
        bundle = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError("ssl.truststore.password", "[hidden]", f"the PKCS12 trust store could not be opened: {exc}")
    certificates = [c.certificate for c in bundle.additional_certs] + ([bundle.cert.certificate] if bundle.cert else [])
    if not certificates:
        raise ConfigError("ssl.truststore.location", location, "the PKCS12 trust store holds no certificate")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certificates)


class _pem_file:
    """A private temporary file holding inline PEM for the time it is loaded (ssl reads files only)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __enter__(self) -> str:
        fd, self.path = tempfile.mkstemp(suffix=".pem")  # created 0600
        with os.fdopen(fd, "w") as out:
            out.write(self.text)
        return self.path

    def __exit__(self, *exc: object) -> None:
        os.unlink(self.path)
