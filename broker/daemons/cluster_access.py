"""How `tidemq-cluster` itself reaches a topology's name server and brokers: signed and in TLS
when the topology asks for it, as its brokers' own calls are.

- Credentials: with aclEnable=true on a broker, the first admin account of that broker's ACL
  file, the account the brokers sign their own requests with (broker/acl/own_account.py). Reading it
  needs the right to read the ACL file, which whoever runs the cluster has.
- TLS: when the name server's or a broker's remoting port speaks TLS (tls.server.mode not
  disabled), with the client settings a broker uses for its own connections (tls.client.*, the
  CA to trust and the client certificate a name server may require); without them, the
  system's CAs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidemq.broker.acl.ha_auth import replication_account
from tidemq.broker.acl.rules import AclFileError, load_rules
from tidemq.broker.acl.watch import acl_paths, rocketmq_home
from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import ACCESS_KEY_ENV, SECRET_KEY_ENV
from tidemq.client.remoting.signing import SessionCredentials
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.common.errors import ConfigError

Props = Mapping[str, str]


class AccessError(ConfigError):
    """The topology's credentials cannot be read (the ACL file named is missing or bad)."""


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    credentials: SessionCredentials | None = None
    tls: TlsClientSettings | None = None

    def admin(self, namesrv_addr: str, timeout: float) -> AdminClient:
        credentials = self.credentials
        return AdminClient(
            namesrv_addr,
            timeout=timeout,
            access_key=credentials.access_key if credentials is not None else "",
            secret_key=credentials.secret_key if credentials is not None else "",
            tls=self.tls,
        )

    @property
    def description(self) -> str:
        """What the launcher says it uses ("" when plain)."""
        parts = []
        if self.tls is not None:
            parts.append("TLS")
        if self.credentials is not None:
            parts.append(f"signing as {self.credentials.access_key}")
        return ", ".join(parts)


def _true(props: Props, key: str) -> bool:
    return props.get(key, "false").strip().lower() == "true"


def _speaks_tls(props: Props) -> bool:
    return props.get("tls.server.mode", "disabled").strip() not in ("", "disabled")


def access_of(namesrv: Props, brokers: Iterable[Props]) -> ClusterAccess:
    """The access a topology's checks need, from its processes' effective keys."""
    brokers = list(brokers)
    credentials = None
    acl_broker = next((b for b in brokers if _true(b, "aclEnable")), None)
    if acl_broker is not None:
        credentials = own_credentials(acl_broker)
    tls = None
    if any(_speaks_tls(p) for p in (namesrv, *brokers)):
        client = next((b for b in brokers if _true(b, "tls.enable")), {})
        tls = TlsClientSettings(
            trust_cert_path=client.get("tls.client.trustCertPath", ""),
            verify=client.get("tls.client.authServer", "true").strip().lower() != "false",
            cert_path=client.get("tls.client.certPath", ""),
            key_path=client.get("tls.client.keyPath", ""),
            key_password=client.get("tls.client.keyPassword", ""),
        )
    return ClusterAccess(credentials, tls)


def own_credentials(broker: Props) -> SessionCredentials:
    """The first admin account of the broker's ACL file (AccessError when there is none)."""
    try:
        paths = acl_paths(broker.get("aclFile", ""), rocketmq_home())
        rules = load_rules(paths)
    except AclFileError as exc:
        raise AccessError(f"aclFile: {exc}") from None
    account = replication_account(rules)
    if account is None:
        shown = ", ".join(map(str, paths))
        raise AccessError(f"aclEnable: no admin account in {shown} to sign the checks with")
    return SessionCredentials(account.access_key, account.secret_key)


def dashboard_access(
    access: ClusterAccess, environ: Mapping[str, str] = os.environ
) -> tuple[list[str], dict[str, str]]:
    """(options, environment) of the dashboard the launcher starts: the TLS of the checks, and
    with their credentials, unless `environ` names an account of the operator's own, the
    brokers' account to sign its reads with, read-only (its console has no login, and this is
    an admin account). The secret goes in the environment, not on a command line others see."""
    options: list[str] = []
    tls = access.tls
    if tls is not None:
        options.append("--tls")
        for flag, value in (
            ("--tls-trust", tls.trust_cert_path),
            ("--tls-cert", tls.cert_path),
            ("--tls-key", tls.key_path),
        ):
            if value:
                options += [flag, value]
    env: dict[str, str] = {}
    credentials = access.credentials
    if credentials is not None and not environ.get(ACCESS_KEY_ENV):
        env = {ACCESS_KEY_ENV: credentials.access_key, SECRET_KEY_ENV: credentials.secret_key}
        options.append("--read-only")
    return options, env
