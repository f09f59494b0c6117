"""The HA port's guards as the broker wires them: the allow-list of slave addresses and TLS with
certificates on both sides (tidemq's keys in ha/config.py; what they do: ha/transport.py).

A master with `haAllowedSlaveAddresses` closes, before a byte is read or sent, every connection
from an address outside the list. With `haTlsEnable=true` the master's HA port speaks only TLS,
presents `haTlsCertPath`/`haTlsKeyPath` and requires a client certificate that chains to
`haTlsTrustCertPath`; the slave presents its own certificate and verifies the master's (chain
and address) against the same kind of bundle. A file that does not load stops start-up naming
its key.
"""

from __future__ import annotations

import functools
import ssl

from tidemq.client.remoting.tls import (
    ClientAuth,
    TlsClientSettings,
    TlsMode,
    TlsServerSettings,
    TlsSetupError,
)
from tidemq.ha.config import HAConfig, address_allowed
from tidemq.ha.transport import Connect, Listen, connect_tcp, listen_tcp
from tidemq.store.errors import ConfigError


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


def ha_listen(config: HAConfig) -> Listen:
    """How the master's HAService accepts slaves."""
    networks = config.allowed_slave_networks
    allow = functools.partial(address_allowed, networks) if networks else None
    tls = master_context(config) if config.ha_tls_enable else None
    if allow is None and tls is None:
        return listen_tcp
    return functools.partial(listen_tcp, allow=allow, tls=tls)


def ha_connect(config: HAConfig) -> Connect:
    """How a slave's HAClient connects to its master."""
    if not config.ha_tls_enable:
        return connect_tcp
    return functools.partial(connect_tcp, tls=slave_context(config))
