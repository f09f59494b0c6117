"""TLS for a client's connections (RocketMQ's TlsSystemConfig, client side), and the loading
of certificate chains and trust bundles that the server side (broker/remoting/tls.py) shares.

A client verifies the server's certificate and name by default (`TlsClientSettings`): against
its `trust_cert_path` bundle, else the system's CAs. `verify=False` is RocketMQ's
`tls.client.authServer=false` and is for tests and trusted networks only.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from tidemq.common.errors import ConfigError


class TlsSetupError(ConfigError):
    """A certificate, key or trust file that cannot be used; the message names its key (a
    daemon stops at start-up with it, as with any bad setting)."""


def load_chain(
    context: ssl.SSLContext, cert_path: str, key_path: str, password: str, what: str
) -> None:
    try:
        context.load_cert_chain(cert_path, key_path or None, password or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"{what}: cannot load {cert_path} / {key_path}: {exc}") from None


def load_trust(context: ssl.SSLContext, trust_path: str, what: str) -> None:
    try:
        context.load_verify_locations(cafile=trust_path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"{what}: cannot load {trust_path}: {exc}") from None


@dataclass(frozen=True, slots=True)
class TlsClientSettings:
    """How a client connects with TLS: verifying the server unless `verify` is False."""

    trust_cert_path: str = ""
    verify: bool = True
    cert_path: str = ""
    key_path: str = ""
    key_password: str = field(default="", repr=False)

    def context(self) -> ssl.SSLContext:
        try:  # the bundle given, else the system's CAs
            context = ssl.create_default_context(cafile=self.trust_cert_path or None)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSetupError(
                f"tls.client.trustCertPath: cannot load {self.trust_cert_path}: {exc}"
            ) from None
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_path:
            load_chain(context, self.cert_path, self.key_path, self.key_password, "tls.client")
        return context
