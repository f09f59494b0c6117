"""`tidemq-cluster secure-init DIR`: a secure topology's certificates, credentials and files.

From a topology folder (deploy/secure by default) it writes DIR, a topology folder of its own
that `tidemq-cluster run DIR` starts and whose files `brokerd -c` and `namesrvd -c` read:

- `ca.pem` (0644): the CA of the remoting ports; clients trust it, and the name server checks
  client certificates against it.
- `server.pem`, `server.key` (0644, 0600): the name server's and brokers' remoting certificate
  (serverAuth), naming every host.
- `client.pem`, `client.key` (0644, 0600): a remoting client certificate (clientAuth), for the
  brokers' own connections, tidemq-cluster and applications.
- `ha-ca.pem` (0644): the CA of the HA port; only brokers hold a certificate it signed.
- `ha.pem`, `ha.key` (0644, 0600): the brokers' HA certificate, with both usages (a master
  presents it, and so does a slave to its master).
- `plain_acl.yml` (0600): two accounts with random secrets, `tidemq-brokers` (admin: the
  brokers sign their own requests with it and prove it over HA, broker/acl/own_account.py) and
  `tidemq-app` (PUB and SUB on topics, SUB on groups, no admin).
- `application.properties` (0600): the application account's keys and the client TLS files.
- each `*.properties` of the template (0644), with the paths of the files above added at its
  end.

HA has a CA of its own so that the client certificate given to applications does not open the
HA port (`haTlsEnable` admits any certificate its trust file chains). Hosts named in the
certificates: 127.0.0.1, localhost, each `brokerIP1`, `brokerIP2` and `bindAddress` of the
topology, the name servers' hosts of `namesrvAddr`, and `--host`. The CAs' keys are not kept:
nothing more can be signed; to add a host or renew, run again with `--force` (new CAs, keys and
secrets: restart the cluster and hand out the new application files).

DIR is made 0700. A DIR that holds any of these files is refused without `--force`, so running
twice never replaces secrets by accident.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tidemq.broker.daemons.pki import BOTH, CLIENT, SERVER, Authority
from tidemq.broker.properties import load_properties

BROKERS_ACCOUNT: Final = "tidemq-brokers"
APP_ACCOUNT: Final = "tidemq-app"
SECRET_BYTES: Final = 24  # 32 characters of URL-safe Base64; RocketMQ wants more than 6
PRIVATE: Final = 0o600
PUBLIC: Final = 0o644
GENERATED_MARK: Final = "# ----- tidemq-cluster secure-init"
HOST_KEYS: Final = ("brokerIP1", "brokerIP2", "bindAddress")


class SecureInitError(Exception):
    """Why nothing was written, in one line."""


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str


@dataclass(frozen=True, slots=True)
class SecureFiles:
    """What secure-init wrote into `folder`."""

    folder: Path
    brokers: Credentials
    app: Credentials

    def path(self, name: str) -> Path:
        return self.folder / name


FIXED_FILES: Final = (
    "ca.pem",
    "server.pem",
    "server.key",
    "client.pem",
    "client.key",
    "ha-ca.pem",
    "ha.pem",
    "ha.key",
    "plain_acl.yml",
    "application.properties",
)


def secure_init(
    template: Path, folder: Path, hosts: Iterable[str] = (), *, force: bool = False
) -> SecureFiles:
    """Write `folder` from the topology `template` (see the module docstring)."""
    process_files = sorted(template.glob("*.properties"))
    if not process_files:
        raise SecureInitError(f"{template}: no *.properties file to make a topology of")
    folder = folder.resolve()
    names = [*FIXED_FILES, *(f.name for f in process_files)]
    taken = [n for n in names if (folder / n).exists()]
    if taken and not force:
        raise SecureInitError(
            f"{folder} already holds {', '.join(taken)}: nothing written (--force replaces them, "
            "with new keys and secrets)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    all_hosts = ["127.0.0.1", "localhost", *topology_hosts(process_files), *hosts]
    files = SecureFiles(folder, _credentials(BROKERS_ACCOUNT), _credentials(APP_ACCOUNT))
    _write_certificates(folder, all_hosts)
    _write(folder / "plain_acl.yml", acl_file_text(files), PRIVATE)
    _write(folder / "application.properties", application_text(files), PRIVATE)
    for source in process_files:
        is_namesrv = source.name == "namesrv.properties"
        text = source.read_text(encoding="utf-8").rstrip("\n") + "\n"
        _write(folder / source.name, text + generated_block(files, is_namesrv), PUBLIC)
    return files


def topology_hosts(process_files: Iterable[Path]) -> list[str]:
    """The hosts the topology's processes are reached at (its keys that name one)."""
    hosts: list[str] = []
    for file in process_files:
        props = load_properties(file)
        hosts += [props[k] for k in HOST_KEYS if props.get(k, "").strip() not in ("", "0.0.0.0")]
        for address in filter(None, props.get("namesrvAddr", "").split(";")):
            hosts.append(address.strip().rpartition(":")[0].strip("[]"))
    return [h.strip() for h in hosts if h.strip()]


def _credentials(access_key: str) -> Credentials:
    return Credentials(access_key, secrets.token_urlsafe(SECRET_BYTES))


def _write_certificates(folder: Path, hosts: list[str]) -> None:
    remoting = Authority("tidemq remoting CA")
    ha = Authority("tidemq HA CA")
    issued = {
        "server": remoting.issue("tidemq server", SERVER, hosts),
        "client": remoting.issue("tidemq client", CLIENT),
        "ha": ha.issue("tidemq broker HA", BOTH, hosts),
    }
    _write(folder / "ca.pem", remoting.cert_pem, PUBLIC)
    _write(folder / "ha-ca.pem", ha.cert_pem, PUBLIC)
    for name, pair in issued.items():
        _write(folder / f"{name}.key", pair.key_pem, PRIVATE)
        _write(folder / f"{name}.pem", pair.cert_pem, PUBLIC)


def _write(path: Path, content: str | bytes, mode: int) -> None:
    """Write `path` with `mode` from its first byte on (a secret is never readable by others,
    not even for a moment, whatever the umask); an existing file is replaced."""
    data = content.encode("utf-8") if isinstance(content, str) else content
    staged = path.with_name(f".{path.name}.new")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(staged, path)


def acl_file_text(files: SecureFiles) -> str:
    brokers, app = files.brokers, files.app
    return f"""\
# tidemq-cluster secure-init: no globalWhiteRemoteAddresses, every request is signed.
# The brokers sign their own requests with the first admin account (broker/acl/own_account.py).
accounts:
  - accessKey: {brokers.access_key}
    secretKey: {brokers.secret_key}
    admin: true
  - accessKey: {app.access_key}
    secretKey: {app.secret_key}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def application_text(files: SecureFiles) -> str:
    path = files.path
    return f"""\
# tidemq-cluster secure-init: the application account (plain_acl.yml) and the client TLS files.
accessKey={files.app.access_key}
secretKey={files.app.secret_key}
tls.client.trustCertPath={_escape(path("ca.pem"))}
tls.client.certPath={_escape(path("client.pem"))}
tls.client.keyPath={_escape(path("client.key"))}
"""


def generated_block(files: SecureFiles, is_namesrv: bool) -> str:
    """The keys naming this folder's files, appended to a process's properties."""
    path = files.path
    keys = {
        "tls.server.certPath": path("server.pem"),
        "tls.server.keyPath": path("server.key"),
        "tls.server.trustCertPath": path("ca.pem"),
    }
    if not is_namesrv:
        keys |= {
            "aclFile": path("plain_acl.yml"),
            "tls.client.trustCertPath": path("ca.pem"),
            "tls.client.certPath": path("client.pem"),
            "tls.client.keyPath": path("client.key"),
            "haTlsCertPath": path("ha.pem"),
            "haTlsKeyPath": path("ha.key"),
            "haTlsTrustCertPath": path("ha-ca.pem"),
        }
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"{GENERATED_MARK} {stamp}: the files of this folder"]
    lines += [f"{key}={_escape(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def _escape(path: Path) -> str:
    """A path as a properties value (a backslash starts an escape there)."""
    return str(path).replace("\\", "\\\\")
