"""`tidemq-cluster secure-init` without sockets: the files it writes and their modes, the
certificates and whom they name, the secrets, refusing to overwrite, and the launcher reading the
folder it made (credentials and TLS for its checks) or refusing the bare template."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from tidemq.broker.acl.rules import load_rules
from tidemq.broker.daemons.cluster import DEPLOY_DIR, ClusterError, load_topology, main
from tidemq.broker.daemons.secure_init import FIXED_FILES, SecureInitError, secure_init
from tidemq.broker.properties import load_properties

TEMPLATE = DEPLOY_DIR / "secure"
PRIVATE = ("server.key", "client.key", "ha.key", "plain_acl.yml", "application.properties")


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that leaves every file readable by all: the modes must not come from it."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def sans(path: Path) -> set[str]:
    names = cert(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n.value) for n in names}


def test_files_and_their_modes(tmp_path: Path, open_umask: None) -> None:
    folder = tmp_path / "secure"
    secure_init(TEMPLATE, folder)
    assert mode(folder) == 0o700
    for name in FIXED_FILES:
        assert mode(folder / name) == (0o600 if name in PRIVATE else 0o644), name
    templates = sorted(p.name for p in TEMPLATE.glob("*.properties"))
    assert sorted(p.name for p in folder.glob("*.properties")) == sorted(
        [*templates, "application.properties"]
    )
    assert not list(folder.glob(".*.new"))  # no staged file left behind


def test_certificates_name_the_hosts_and_chain_to_their_own_ca(tmp_path: Path) -> None:
    folder = tmp_path / "secure"
    secure_init(TEMPLATE, folder, ["broker1.example", "10.0.0.7"])
    assert sans(folder / "server.pem") == {"127.0.0.1", "localhost", "broker1.example", "10.0.0.7"}
    assert sans(folder / "ha.pem") == sans(folder / "server.pem")
    ca, ha_ca = cert(folder / "ca.pem"), cert(folder / "ha-ca.pem")
    for name in ("server", "client"):
        cert(folder / f"{name}.pem").verify_directly_issued_by(ca)
    cert(folder / "ha.pem").verify_directly_issued_by(ha_ca)
    # The applications' client certificate does not chain to the HA CA: it opens no HA port.
    with pytest.raises((ValueError, InvalidSignature)):
        cert(folder / "client.pem").verify_directly_issued_by(ha_ca)


def test_acl_file_and_the_processes_files(tmp_path: Path) -> None:
    folder = tmp_path / "secure"
    written = secure_init(TEMPLATE, folder)
    rules = load_rules([folder / "plain_acl.yml"])
    assert rules.global_white == ()
    brokers, app = rules.accounts["tidemq-brokers"], rules.accounts["tidemq-app"]
    assert brokers.admin and not app.admin
    assert len(brokers.secret_key) > 6 and brokers.secret_key != app.secret_key
    assert app.secret_key == written.app.secret_key
    application = load_properties(folder / "application.properties")
    assert application["secretKey"] == app.secret_key
    broker = load_properties(folder / "broker-a.properties")
    assert broker["aclEnable"] == "true" and broker["haTlsEnable"] == "true"
    for key in ("aclFile", "tls.server.certPath", "tls.client.certPath", "haTlsTrustCertPath"):
        assert Path(broker[key]).is_file(), key
    assert Path(broker["haTlsTrustCertPath"]).name == "ha-ca.pem"
    namesrv = load_properties(folder / "namesrv.properties")
    assert "aclFile" not in namesrv and Path(namesrv["tls.server.trustCertPath"]).is_file()


def test_a_second_run_is_refused_unless_forced(tmp_path: Path) -> None:
    folder = tmp_path / "secure"
    first = secure_init(TEMPLATE, folder)
    acl_before = (folder / "plain_acl.yml").read_bytes()
    with pytest.raises(SecureInitError, match=r"already holds .*--force"):
        secure_init(TEMPLATE, folder)
    assert (folder / "plain_acl.yml").read_bytes() == acl_before
    second = secure_init(TEMPLATE, folder, force=True)
    assert second.app.secret_key != first.app.secret_key
    assert (folder / "plain_acl.yml").read_bytes() != acl_before


def test_the_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(main, ["secure-init", str(tmp_path / "s"), "--host", "mq.example"])
    assert made.exit_code == 0, made.output
    assert "tidemq-cluster run" in made.output
    assert "mq.example" in sans(tmp_path / "s" / "server.pem")
    again = runner.invoke(main, ["secure-init", str(tmp_path / "s")])
    assert again.exit_code == 1 and "--force" in again.output


def test_the_launcher_signs_and_uses_tls_from_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIDEMQ_ACCESS_KEY", raising=False)  # the operator's own account
    folder = tmp_path / "secure"
    secure_init(TEMPLATE, folder)
    topology = load_topology(folder, tmp_path / "data", dashboard_port=8082)
    access = topology.access
    assert access.credentials is not None and access.credentials.access_key == "tidemq-brokers"
    assert access.tls is not None
    assert Path(access.tls.cert_path) == folder / "client.pem"
    assert Path(access.tls.trust_cert_path) == folder / "ca.pem"
    # The dashboard: the same TLS, and the brokers' account in its environment, read-only.
    dashboard = topology.dashboard
    assert dashboard is not None
    assert dashboard.args[dashboard.args.index("--tls-cert") + 1] == str(folder / "client.pem")
    assert "--read-only" in dashboard.args
    assert dashboard.env["TIDEMQ_ACCESS_KEY"] == "tidemq-brokers"
    assert access.credentials.secret_key not in " ".join(dashboard.args)


def test_the_bare_template_says_to_make_the_files_first(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="tidemq-cluster secure-init"):
        load_topology(TEMPLATE, tmp_path / "data")


def test_a_plain_topology_is_checked_plainly(tmp_path: Path) -> None:
    topology = load_topology(DEPLOY_DIR / "local", tmp_path / "data", dashboard_port=8082)
    assert topology.access.credentials is None and topology.access.tls is None
    dashboard = topology.dashboard
    assert dashboard is not None and dashboard.env == {} and "--tls" not in dashboard.args


def test_a_template_without_process_files_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SecureInitError, match=r"no \*\.properties"):
        secure_init(tmp_path, tmp_path / "out")
