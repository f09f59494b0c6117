"""Operator mistakes at a real daemon's start-up: one line on stderr, exit 1, nothing touched.

A busy port (any of listenPort, a master's haListenPort, metricsPort, held here by the test
itself) is named with the process holding it before the store is created (brokerd without -c
would otherwise make ~/store: HOME is a temporary folder here). A store folder the broker cannot
write stops it with one line instead of a traceback at every persist. Root may write anywhere
through CAP_DAC_OVERRIDE, so as root the broker runs without that one capability (setpriv drops
it from the bounding set): it stays root, so it reads the checkout and its .venv wherever they lie
(a 0700 home or `mktemp -d` included), and a folder of mode 555 refuses it as it would any user.
`brokerd -p` shows the warning for an unknown key that start-up would log; a key that is a
known one mistyped stops either daemon. brokerd raises its soft limit of open files to the hard
one (as the JVM does for RocketMQ); a limit that still cannot hold the ConsumeQueue files
maxMappedConsumeQueueFiles keeps open lowers the default bound to what fits, and stops a broker
whose operator set the key with one line naming it.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import (
    BROKER_BOOTED,
    Daemon,
    ProcessGroup,
    brokerd_command,
    free_port,
)

# What lets root write a folder of mode 555: the one capability dropped to see the refusal.
WITHOUT_DAC_OVERRIDE = ["setpriv", "--bounding-set=-dac_override", "--inh-caps=-dac_override"]


def run_brokerd(
    home: Path,
    *args: str,
    without_dac_override: bool = False,
    open_files: str = "",
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """`open_files`: "SOFT:HARD" limits of open files to start it with (prlimit)."""
    command = [sys.executable, "-m", "tidemq.broker", *args]
    if without_dac_override:
        command = [*WITHOUT_DAC_OVERRIDE, *command]
    if open_files:
        command = ["prlimit", f"--nofile={open_files}", *command]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "HOME": str(home)},
        cwd=home,
    )


@pytest.mark.parametrize(
    ("role", "key"),
    [
        ("ASYNC_MASTER", "listenPort"),
        ("SYNC_MASTER", "haListenPort"),
        ("ASYNC_MASTER", "metricsPort"),
        ("SLAVE", "metricsPort"),
        ("SLAVE", "grpcServerPort"),
    ],
)
def test_a_busy_port_stops_brokerd_before_it_makes_its_store(
    tmp_path: Path, role: str, key: str
) -> None:
    ports = {
        "listenPort": free_port(),
        "haListenPort": free_port(),
        "metricsPort": free_port(),
        "grpcServerPort": free_port(),
    }
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[key]))
        holder.listen()
        done = run_brokerd(
            tmp_path,
            f"brokerRole={role}",
            "brokerId=1" if role == "SLAVE" else "brokerId=0",
            "namesrvAddr=127.0.0.1:1",
            *(f"{k}={v}" for k, v in ports.items()),
        )
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"brokerd: cannot start: {key} {ports[key]} on 0.0.0.0 is in use by ")
    assert f"pid {os.getpid()} (" in line
    assert not (tmp_path / "store").exists()
    assert "listening" not in done.stdout


def test_namesrvd_names_the_holder_of_its_busy_metrics_port(tmp_path: Path) -> None:
    busy = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        done = subprocess.run(
            [sys.executable, "-m", "tidemq.broker.namesrv", f"listenPort={free_port()}",
             f"metricsPort={busy}"],
            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(
        f"namesrvd: cannot start: metricsPort {busy} on 0.0.0.0 is in use by pid {os.getpid()}"
    )


def test_an_unwritable_store_stops_brokerd_with_one_line(tmp_path: Path) -> None:
    """A store left by another user (here: a folder of mode 555 under a writable root)."""
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    (store / "config").mkdir()
    (store / "commitlog").chmod(0o555)
    try:
        done = run_brokerd(
            tmp_path,
            f"storePathRootDir={store}",
            f"listenPort={free_port()}",
            f"grpcServerPort={free_port()}",
            "namesrvAddr=127.0.0.1:1",
            without_dac_override=os.getuid() == 0,
        )
    finally:
        (store / "commitlog").chmod(0o755)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"brokerd: cannot start: store folder {store / 'commitlog'} is not writable by this user "
        f"(uid {os.getuid()})"
    ]
    assert set(store.iterdir()) == {store / "commitlog", store / "config"}  # nothing made


def test_print_config_shows_the_unknown_key_warning(tmp_path: Path) -> None:
    done = run_brokerd(tmp_path, "-p", "listenPort=1234", "someoneElsesKey=x")
    assert done.returncode == 0, done.stderr
    assert "listenPort=1234" in done.stdout.splitlines()
    assert done.stderr.splitlines() == [
        "brokerd: unknown configuration key someoneElsesKey ignored"
    ]


def test_a_mistyped_key_stops_either_daemon_with_did_you_mean(tmp_path: Path) -> None:
    """`brokerRoll=SYNC_MASTER` ignored would run an ASYNC_MASTER: a key within two edits of
    a known one (or differing in case) stops start-up before anything is made."""
    store = tmp_path / "store"
    config = tmp_path / "broker.properties"
    config.write_text(
        f"brokerName=broker-a\nlistenPort={free_port()}\nhaListenPort={free_port()}\n"
        f"metricsPort=0\nstorePathRootDir={store}\nbrokerRoll=SYNC_MASTER\n"
    )
    done = run_brokerd(tmp_path, "-c", str(config))
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == ["brokerd: unknown key brokerRoll: did you mean brokerRole?"]
    assert not store.exists()
    done = subprocess.run(
        [sys.executable, "-m", "tidemq.broker.namesrv", f"ListenPort={free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "namesrvd: unknown key ListenPort: did you mean listenPort?"
    ]


def test_too_few_open_files_for_the_queue_files_set_stops_brokerd_with_one_line(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    done = run_brokerd(
        tmp_path,
        f"storePathRootDir={store}",
        f"listenPort={free_port()}",
        f"grpcServerPort={free_port()}",
        "namesrvAddr=127.0.0.1:1",
        "maxMappedConsumeQueueFiles=1024",
        open_files="1024:1024",
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "brokerd: cannot start: maxMappedConsumeQueueFiles 1024 needs about 2560 open files "
        "(two per ConsumeQueue file, 512 for the rest); this process may open 1024 "
        "(ulimit -n): lower the key or raise the limit"
    ]
    assert not store.exists()


def test_brokerd_raises_its_soft_limit_of_open_files_to_the_hard_one(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """A soft limit of 1024 (a shell's default) under a hard one of 8192: the default key fits."""
    port = free_port()
    command = brokerd_command(port, namesrv.address, tmp_path / "store")
    broker = processes.start(
        ["prlimit", "--nofile=1024:8192", *command],
        port=port,
        name="brokerd",
        ready_text=BROKER_BOOTED,
    )
    limits = Path(f"/proc/{broker.pid}/limits").read_text()
    [line] = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert line.split()[3:5] == ["8192", "8192"], line


def test_the_default_bound_of_queue_files_is_lowered_to_what_the_limit_holds(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    port = free_port()
    command = brokerd_command(port, namesrv.address, tmp_path / "store")
    broker = processes.start(
        ["prlimit", "--nofile=1024:1024", *command],
        port=port,
        name="brokerd",
        ready_text=BROKER_BOOTED,
    )
    assert "maxMappedConsumeQueueFiles 1024 lowered to 256: the limit of open files" in (
        broker.log_text()
    )


def test_a_sigterm_while_brokerd_starts_stops_it_cleanly_once_started(tmp_path: Path) -> None:
    """The first registration is part of the start: a name server that never answers holds
    the broker there (registerBrokerTimeoutMills) while the signal comes. It used to kill the
    broker (the handler was installed after the start), leaving its store marked aborted, so
    the next start checked every queue as after a crash."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    store = tmp_path / "store"
    command = brokerd_command(
        free_port(),
        f"127.0.0.1:{silent.getsockname()[1]}",
        store,
        "registerBrokerTimeoutMills=2000",
        f"metricsPort={free_port()}",
    )
    broker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The registration's connection waits in the backlog: the broker is mid-start.
        readable, _, _ = select.select([silent], [], [], 60)
        assert readable, "brokerd never came to register"
        assert (store / "abort").exists()
        broker.send_signal(signal.SIGTERM)
        out, err = broker.communicate(timeout=60)
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.communicate()
        silent.close()
    assert broker.returncode == 0, err[-2000:]
    assert "SIGTERM received while starting, stopping" in err
    assert "listening on" not in out
    assert not (store / "abort").exists()
