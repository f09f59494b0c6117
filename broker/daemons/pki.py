"""Certificates for a secure topology (`tidemq-cluster secure-init`): a CA and the certificates it
signs, as PEM.

Keys are EC P-256: quick to make, and every TLS 1.2/1.3 peer takes them. Certificates are valid
for `VALID_DAYS` from a day before now (clocks of a cluster's machines drift). A server
certificate names its hosts (IP addresses and DNS names) in subjectAltName, which is what a
client checks; a certificate for both ends (a broker's HA certificate: a master presents it, a
slave presents it to its master) carries both extended key usages.

`cryptography` rather than the `openssl` command: the extensions are data here, not an openssl
config file written per run, errors are exceptions, and slim images lack the command.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS: Final = 730  # renewed by running secure-init again (--force)
SERVER: Final = (ExtendedKeyUsageOID.SERVER_AUTH,)
CLIENT: Final = (ExtendedKeyUsageOID.CLIENT_AUTH,)
BOTH: Final = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)


@dataclass(frozen=True, slots=True)
class Issued:
    """A certificate and its private key, as PEM."""

    cert_pem: bytes
    key_pem: bytes


class Authority:
    """A self-signed CA that signs leaf certificates. Its key lives only in this object."""

    def __init__(self, common_name: str) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        start, end = _validity()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), False)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        usages: tuple[x509.ObjectIdentifier, ...],
        hosts: Iterable[str] = (),
    ) -> Issued:
        """A leaf certificate for `usages`, naming `hosts` (IPs or DNS names) when given."""
        key = ec.generate_private_key(ec.SECP256R1())
        start, end = _validity()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), False
            )
        )
        names = [_general_name(h) for h in dict.fromkeys(hosts)]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return Issued(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(days=1), now + datetime.timedelta(days=VALID_DAYS)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)
