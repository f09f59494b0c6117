"""The doors a daemon leaves open, said once at start: one WARNING line per door that listens on
an address other than loopback with nothing that checks who comes in.

- remoting (brokerd): no aclEnable and no TLS that requires a client certificate (anyone who
  reaches the port may send, read and administer);
- remoting (namesrvd): no TLS that requires a client certificate (RocketMQ 4.x's name server has
  no ACL: anyone may register a broker or read the routes);
- HA (a brokerd that is or may become a master): no haTlsEnable (the CommitLog crosses the network
  in plaintext; who is admitted is said in the same line).

Bound to a loopback address, a port is no door: nothing is said.
"""

from __future__ import annotations

import ipaddress

from tidemq.broker.config import RemotingConfig
from tidemq.broker.remoting.tls import ClientAuth, TlsMode
from tidemq.ha.config import HAConfig


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def _mutual_tls(remoting: RemotingConfig) -> bool:
    return (
        remoting.tls_server_mode is TlsMode.enforcing
        and remoting.tls_server_need_client_auth is ClientAuth.require
    )


def broker_doors(
    remoting: RemotingConfig, port: int, acl_enable: bool, ha: HAConfig | None, ha_port: int
) -> list[str]:
    """The warnings of a broker listening on `port` (and, `ha` given, HA on `ha_port`)."""
    bind = remoting.bind_address
    if is_loopback(bind):
        return []
    doors = []
    if not acl_enable and not _mutual_tls(remoting):
        doors.append(
            f"open door: remoting port {bind}:{port} accepts any request from anyone who reaches "
            "it (no aclEnable); close it with aclEnable=true and an aclFile, "
            "tls.server.mode=enforcing with tls.server.need.client.auth=require, or "
            "bindAddress=127.0.0.1"
        )
    if ha is not None and not ha.ha_tls_enable:
        listed = ha.ha_allowed_slave_addresses.strip()
        who = (
            f"haAllowedSlaveAddresses={listed}"
            if listed
            else "the group's slaves as the name servers know them"
        )
        proof = ", each proving an admin ACL account" if acl_enable else ""
        doors.append(
            f"open door: HA port {bind}:{ha_port} replicates the CommitLog in plaintext "
            f"(no haTlsEnable) to {who}{proof}; close it with haTlsEnable=true and "
            "certificates (haTlsCertPath, haTlsKeyPath, haTlsTrustCertPath)"
        )
    return doors


def namesrv_doors(remoting: RemotingConfig, port: int) -> list[str]:
    bind = remoting.bind_address
    if is_loopback(bind) or _mutual_tls(remoting):
        return []
    return [
        f"open door: name server port {bind}:{port} lets anyone who reaches it register a "
        "broker or read the routes (RocketMQ 4.x's name server has no ACL); close it with "
        "tls.server.mode=enforcing and tls.server.need.client.auth=require, a firewall, or "
        "bindAddress=127.0.0.1"
    ]
