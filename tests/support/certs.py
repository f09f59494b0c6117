"""Test certificates, made when a test runs (nothing checked in): a CA, certificates it signs for
servers and clients, an expired one, and a CA nobody trusts.

`make_pki(folder)` writes PEM files and returns their paths. Server certificates name
127.0.0.1 and localhost. Keys are EC P-256 (fast to make) and unencrypted.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA everyone trusts
    server: CertFiles  # 127.0.0.1 / localhost, signed by ca
    client: CertFiles  # a client certificate signed by ca
    expired: CertFiles  # a server certificate signed by ca whose validity ended
    stranger_ca: Path  # a CA nobody trusts
    stranger: CertFiles  # server and client use, signed by stranger_ca


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _ca(folder: Path, name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Path]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    path = folder / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key, path


def _leaf(
    folder: Path,
    name: str,
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey, Path],
    *,
    expired: bool = False,
) -> CertFiles:
    ca_cert, ca_key, _path = ca
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    if expired:
        start, end = now - datetime.timedelta(days=10), now - datetime.timedelta(days=2)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = CertFiles(folder / f"{name}.pem", folder / f"{name}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "test-ca")
    stranger_ca = _ca(folder, "stranger-ca")
    return Pki(
        ca=ca[2],
        server=_leaf(folder, "server", ca),
        client=_leaf(folder, "client", ca),
        expired=_leaf(folder, "expired", ca, expired=True),
        stranger_ca=stranger_ca[2],
        stranger=_leaf(folder, "stranger", stranger_ca),
    )


def mutual_tls_contexts(pki: Pki) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts that trust `pki`'s CA, each presenting its certificate; the
    server requires the client's."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    server.load_cert_chain(pki.server.cert, pki.server.key)
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.load_cert_chain(pki.client.cert, pki.client.key)
    return server, client
