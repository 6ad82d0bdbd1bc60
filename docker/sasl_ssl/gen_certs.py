#!/usr/bin/env python3
"""Make a certificate authority and a broker certificate for the SASL_SSL example.

    python gen_certs.py DIR [HOSTNAME ...]     (default names: localhost klamm)

Writes DIR/ca.pem (give it to clients: ssl.ca.location, ssl.truststore.location with
ssl.truststore.type=PEM) and DIR/broker.pem (the broker's private key and certificate chain:
ssl.keystore.location with ssl.keystore.type=PEM). Existing files are kept, so restarting the
example does not change the certificates clients trust. Needs the `cryptography` package,
which klamm installs.
"""

from __future__ import annotations

import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 825


def _issue(subject: str, names: list[str], issuer: tuple[ec.EllipticCurvePrivateKey, x509.Name] | None):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    signer, issuer_name = issuer if issuer is not None else (key, name)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False)
    return key, builder.sign(signer, hashes.SHA256())


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _pem(key: ec.EllipticCurvePrivateKey | None, *certificates: x509.Certificate) -> bytes:
    out = b"" if key is None else key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption())
    return out + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def generate(directory: Path, names: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, broker_file = directory / "ca.pem", directory / "broker.pem"
    if ca_file.exists() and broker_file.exists():
        return
    ca_key, ca = _issue("klamm example CA", [], None)
    broker_key, broker = _issue(names[0], names, (ca_key, ca.subject))
    ca_file.write_bytes(_pem(None, ca))
    broker_file.touch(mode=0o600)
    broker_file.write_bytes(_pem(broker_key, broker, ca))


if __name__ == "__main__":
    generate(Path(sys.argv[1]), sys.argv[2:] or ["localhost", "klamm", "127.0.0.1"])
