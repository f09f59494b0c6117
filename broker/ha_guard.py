"""The HA port's guards as the broker wires them: who may connect, TLS with certificates on both
sides, and with aclEnable the HA proof (tidemq's keys in ha/config.py; what they do:
ha/transport.py).

A master with `haAllowedSlaveAddresses` closes, before a byte is read or sent, every connection
from an address outside the list (`0.0.0.0/0,::/0` opens the port to anyone). Without it, only the
addresses of the broker group's members are admitted (broker/ha_members.py): the port is closed
to strangers by default. With aclEnable=true and no haTlsEnable, an admitted connection must
then prove an admin account of the ACL (broker/acl/ha_auth.py) before its first CommitLog byte.
With `haTlsEnable=true` the master's HA port speaks only TLS, presents `haTlsCertPath`/
`haTlsKeyPath` and requires a client certificate that chains to `haTlsTrustCertPath`; the slave
presents its own certificate and verifies the master's (chain and address) against the same kind
of bundle. A file that does not load stops start-up naming its key.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable

from tidemq.broker.acl.ha_auth import master_handshake, proving_connect
from tidemq.broker.acl.rules import AclRules
from tidemq.broker.ha_members import GroupMembers
from tidemq.broker.remoting.tls import ClientAuth, TlsMode, TlsServerSettings
from tidemq.client.transport.tls import TlsClientSettings, TlsSetupError
from tidemq.common.errors import ConfigError
from tidemq.ha.config import HAConfig, address_allowed
from tidemq.ha.transport import Connect, Handshake, Listen, connect_tcp, listen_tcp


def _context(build: functools.partial[ssl.SSLContext]) -> ssl.SSLContext:
    try:
        return build()
    except TlsSetupError as exc:
        reason = str(exc).split(": ", 1)[-1]
        raise ConfigError(f"haTlsCertPath/haTlsKeyPath/haTlsTrustCertPath: {reason}") from None


def master_context(config: HAConfig) -> ssl.SSLContext:
    settings = TlsServerSettings(
        TlsMode.enforcing,
        config.ha_tls_cert_path,
        config.ha_tls_key_path,
        "",
        config.ha_tls_trust_cert_path,
        ClientAuth.require,
    )
    return _context(functools.partial(settings.context))


def slave_context(config: HAConfig) -> ssl.SSLContext:
    settings = TlsClientSettings(
        config.ha_tls_trust_cert_path, True, config.ha_tls_cert_path, config.ha_tls_key_path
    )
    return _context(functools.partial(settings.context))


def ha_listen(
    config: HAConfig, members: GroupMembers | None = None, proof: Handshake | None = None
) -> Listen:
    """How the master's HAService accepts slaves: `members` admits when there is no allow-list,
    `proof` is the ACL handshake (None: none)."""
    networks = config.allowed_slave_networks
    allow = functools.partial(address_allowed, networks) if networks else None
    admit = members.admit if members is not None and not networks else None
    tls = master_context(config) if config.ha_tls_enable else None
    if allow is None and tls is None and admit is None and proof is None:
        return listen_tcp
    return functools.partial(listen_tcp, allow=allow, tls=tls, admit=admit, handshake=proof)


def ha_connect(config: HAConfig, acl_rules: Callable[[], AclRules] | None = None) -> Connect:
    """How a slave's HAClient connects to its master (`acl_rules`: prove an account of them)."""
    connect = connect_tcp
    if config.ha_tls_enable:
        connect = functools.partial(connect_tcp, tls=slave_context(config))
    if acl_rules is not None and not config.ha_tls_enable:
        return proving_connect(connect, acl_rules)
    return connect


def master_proof(config: HAConfig, acl_rules: Callable[[], AclRules] | None) -> Handshake | None:
    """The master's ACL handshake: with aclEnable (`acl_rules`) unless TLS certificates prove
    the slave already."""
    if acl_rules is None or config.ha_tls_enable:
        return None
    return master_handshake(acl_rules)
