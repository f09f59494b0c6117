"""Controller mode's faults on real processes (issue 16): etcd, namesrvd, brokerd.

- etcd unreachable at start-up: brokerd says so in one line and does not start; so does a
  second broker configured with a brokerId a live broker of the group has;
- the master cut off from etcd (a fault proxy on its etcd connection, partitioned) but not from
  its clients: it stops acknowledging before the lease can expire, saying why in the send
  status; the sends, both epochs and what the new master serves are one history
  (tests/support/history.py) in which no acknowledged message is lost and every SEND_OK came
  from the master of its epoch (the old one's stored before the new one was elected); once etcd
  is back it turns into a slave of the new master in-process and converges byte-identical;
- a master killed with writes its slave never got (the slave was killed first, and restarts
  after the master died): the slave is elected, the killed master restarted keeps that tail in
  `.diverged` files and converges byte-identical;
- electMaster hands the group over to a broker of the SyncStateSet (and refuses one outside it
  in one line); the old master follows the new one;
- a message the SyncStateSet's slave has not acknowledged is stored on the master but not
  readable there until the slave has it (a consumer could otherwise read a deposed master's
  unreplicated tail and skip the acknowledged messages the new master puts at those offsets);
- a slave that does not catch up leaves the SyncStateSet (below minInSyncReplicas the master
  refuses writes: "in-sync replicas not enough"), and with unclean election off is not elected
  when the master dies: no election happens, and its log says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Final

import pytest

from tests.support.conditions import eventually
from tests.support.etcd import EtcdCluster
from tests.support.failover import (
    controller,
    member_overrides,
    start_member,
    wait_master,
    wait_sync_state_set,
)
from tests.support.fault_proxy import FaultProxy
from tests.support.ha_brokers import ha_status
from tests.support.ha_processes import as_int, body_of, commitlog_range, id_of
from tests.support.history import (
    Event,
    Recorder,
    RecordingProducer,
    check,
    record_read,
    record_send,
)
from tests.support.processes import LOOPBACK, Daemon, ProcessGroup, brokerd_command, free_port
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, PullStatus, SendStatus
from tidemq.client.errors import ServiceNotAvailableError, TideMQError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer

TOPIC = "FenceTopic"
GROUP: Final = "broker-a"  # the brokers' name (tests/support/failover.py)


def test_etcd_unreachable_at_start_is_one_line_and_no_broker(
    tmp_path: Path, namesrv: Daemon
) -> None:
    nowhere = f"{LOOPBACK}:{free_port()}"
    args = brokerd_command(
        free_port(),
        namesrv.address,
        tmp_path / "store",
        "enableControllerMode=true",
        f"controllerAddr={nowhere}",
        "brokerRole=SYNC_MASTER",
        "brokerId=1",
        "controllerRequestTimeout=300",
    )
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"brokerd: controllerAddr: etcd unreachable ({nowhere}"
    ), done.stderr
    assert "Traceback" not in done.stderr


async def test_a_second_broker_with_the_same_broker_id_is_refused_in_one_line(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster, api: BrokerAPI
) -> None:
    first = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert await wait_master(api, [first], 30) is first
    args = brokerd_command(
        free_port(), namesrv.address, tmp_path / "twin", *member_overrides(etcd.endpoints, 1)
    )
    done = await asyncio.to_thread(
        subprocess.run, args, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"brokerd: brokerId: broker 1 of this group is already running at {first.address} "
        "(etcd key /tidemq/DefaultCluster/broker-a/members/1); not starting"
    ), done.stderr
    assert (await controller(api, first))["isMaster"]  # the first one is untouched


async def test_master_cut_off_from_etcd_stops_acknowledging_before_the_new_election(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd: EtcdCluster,
    api: BrokerAPI,
    recorder: Recorder,
) -> None:
    host, port = etcd.endpoints.split(";")[0].rsplit(":", 1)
    with FaultProxy(host, int(port)) as proxy:
        old = start_member(processes, namesrv, proxy.address, tmp_path, 1)
        assert await wait_master(api, [old], 30) is old
        recorder.epoch(
            old.address, 1, as_int((await controller(api, old))["electedAtMillis"]) / 1e3
        )
        new = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2)
        await wait_sync_state_set(api, old, [1, 2])

        acknowledged: list[Event] = []  # the history's SEND_OK events, as they come
        stop = asyncio.Event()
        producer = AsyncProducer("fence-producer", namesrv.address, timeout=3, retry_times=0)
        await producer.start()
        recording = RecordingProducer(recorder, producer)
        numbers = iter(range(10**9))

        async def sender() -> None:
            while not stop.is_set():
                try:
                    result = await recording.send(Message(TOPIC, body_of(next(numbers), 100)))
                except TideMQError:
                    await asyncio.sleep(0.01)
                    continue
                if result.ok:
                    acknowledged.append(recorder.events[-1])

        senders = [asyncio.create_task(sender()) for _ in range(4)]
        try:
            await eventually(lambda: len(acknowledged) >= 200, "200 sends acknowledged", 60)
            proxy.partition()  # the master's etcd connection only: clients still reach it
            await wait_master(api, [new], 30)
            elected = as_int((await controller(api, new))["electedAtMillis"])
            recorder.epoch(new.address, 2, elected / 1000)
            after = len(acknowledged)
            await eventually(
                lambda: len(acknowledged) >= after + 100, "sends acknowledged by the new one", 60
            )
        finally:
            stop.set()
            await asyncio.gather(*senders, return_exceptions=True)
            await producer.shutdown()

        # etcd reachable again: the old master learns it was deposed, turns into a slave of
        # the new one in-process, and converges byte-identical.
        proxy.heal()

        async def demoted() -> bool:
            info = await controller(api, old)
            return not info["isMaster"] and info["masterBrokerId"] == 2

        await eventually(demoted, "the old master a slave of the new one", 30)
        end = as_int((await ha_status(api, new.address))["masterCommitLogMaxOffset"])

        async def caught_up() -> bool:
            return as_int((await ha_status(api, old.address)).get("maxOffset", -1)) == end

        await eventually(caught_up, "the old master caught up as a slave", 30)
        assert commitlog_range(tmp_path / "store-1", 0, end) == commitlog_range(
            tmp_path / "store-2", 0, end
        )
        with pytest.raises(ServiceNotAvailableError, match="is a slave"):
            await api.send(old.address, send_header(TOPIC, 0), body_of(10**8, 100))

    refusals = [str(e.get("error")) for e in recorder.events if e.get("status") == "error"]
    fenced = [r for r in refusals if "etcd lease could not be renewed" in r]
    assert fenced, f"no send was told why it was refused: {refusals[:5]}"
    assert "this master stops acknowledging writes" in old.log_text()
    assert {e["broker"] for e in acknowledged} == {old.address, new.address}
    # Judged as a whole: every acknowledged message on the new master at its position, and no
    # SEND_OK of the old master whose store time is at or after the new master's election.
    await record_read(recorder, api, new.address, TOPIC, GROUP, 4)
    judged = check(recorder.events)
    print(judged.summary())
    assert judged.ok, judged.summary()


async def test_a_killed_masters_unreplicated_tail_goes_to_diverged_files_when_it_rejoins(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster, api: BrokerAPI
) -> None:
    old = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, "slaveTimeout=30000")
    assert await wait_master(api, [old], 30) is old
    slave = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2)
    await wait_sync_state_set(api, old, [1, 2])
    for i in range(20):
        sent = await api.send(old.address, send_header(TOPIC, i % 4), body_of(i, 300))
        assert sent.status is SendStatus.SEND_OK
    replicated = as_int((await ha_status(api, old.address))["masterCommitLogMaxOffset"])
    slave.kill()  # it has everything acknowledged so far, and will get nothing more
    pending = [
        asyncio.create_task(
            api.send(old.address, send_header(TOPIC, i % 4), body_of(i, 300), timeout=60)
        )
        for i in range(20, 30)
    ]

    async def appended() -> bool:
        info = await ha_status(api, old.address)
        return as_int(info["masterCommitLogMaxOffset"]) > replicated

    await eventually(appended, "unacknowledged writes on the master", 15)
    tail_end = as_int((await ha_status(api, old.address))["masterCommitLogMaxOffset"])
    old.kill()
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    slave = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2)
    assert await wait_master(api, [slave], 30) is slave
    start = as_int((await controller(api, slave))["epochStartOffset"])
    assert start == replicated

    rejoined = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    for i in range(30, 40):  # the new master's own writes, past where the old tail was
        sent = await api.send(slave.address, send_header(TOPIC, i % 4), body_of(i, 300))
        assert sent.status is SendStatus.SEND_OK
    end = as_int((await ha_status(api, slave.address))["masterCommitLogMaxOffset"])

    async def caught_up() -> bool:
        return as_int((await ha_status(api, rejoined.address))["maxOffset"]) == end

    await eventually(caught_up, "the rejoined broker at the new master's end", 30)
    assert commitlog_range(tmp_path / "store-1", 0, end) == commitlog_range(
        tmp_path / "store-2", 0, end
    )
    diverged = list((tmp_path / "store-1" / "commitlog").glob("*.diverged"))
    assert len(diverged) == 1, diverged
    kept = diverged[0].read_bytes()
    # The unreplicated tail, whole (at least what the master held when killed) and nothing of
    # what the slave had acknowledged.
    assert len(kept) >= tail_end - replicated
    assert any(f"m{i:08d}|".encode() in kept for i in range(20, 30))
    assert not any(f"m{i:08d}|".encode() in kept for i in range(20))
    assert "go to .diverged files" in rejoined.log_text()


async def test_a_lagging_slave_leaves_the_set_and_is_not_elected(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster, api: BrokerAPI
) -> None:
    lag = ("haMaxTimeSlaveNotCatchup=1000", "minInSyncReplicas=2")
    master = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, *lag)
    assert await wait_master(api, [master], 30) is master
    metrics_port = free_port()
    slave = start_member(
        processes, namesrv, etcd.endpoints, tmp_path, 2, *lag, f"metricsPort={metrics_port}"
    )
    await wait_sync_state_set(api, master, [1, 2])
    sent = await api.send(master.address, send_header(TOPIC, 0), body_of(0, 100))
    assert sent.status is SendStatus.SEND_OK
    assert slave.pid is not None
    os.kill(slave.pid, signal.SIGSTOP)
    try:
        # no ack from the stopped slave: it leaves after haMaxTimeSlaveNotCatchup (1 s)
        await wait_sync_state_set(api, master, [1])
        with pytest.raises(TideMQError, match="in-sync replicas not enough"):
            await api.send(master.address, send_header(TOPIC, 0), body_of(9, 100))
        master.kill()
    finally:
        os.kill(slave.pid, signal.SIGCONT)

    def refused() -> bool:
        return "is not in the SyncStateSet [1]" in slave.log_text()

    await eventually(refused, "the slave's reason for not standing", 30)
    # It stays a slave: a send to it is refused as to any slave.
    info = await controller(api, slave)
    assert not info["isMaster"] and info["elections"] == 0, info
    with pytest.raises(ServiceNotAvailableError, match="is a slave"):
        await api.send(slave.address, send_header(TOPIC, 0), body_of(99, 100))
    assert info["noMasterReason"] == (
        "no master; broker 2 is not in the SyncStateSet [1] (enableElectUncleanMaster=false)"
    )
    listed = await asyncio.to_thread(
        subprocess.run,
        [str(Path(sys.executable).with_name("mqadmin")), "clusterList", "-n", namesrv.address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "SLAVE (no master; broker 2 is not in the SyncStateSet [1]" in listed.stdout, listed
    metrics = await asyncio.to_thread(scrape, f"http://{LOOPBACK}:{metrics_port}/metrics")
    assert 'tidemq_controller_is_master{broker="broker-a",brokerId="2",cluster=' in metrics
    lines = {
        line.split("{")[0]: line.rsplit(" ", 1)[1]
        for line in metrics.splitlines()
        if line.startswith("tidemq_controller_")
    }
    assert lines["tidemq_controller_is_master"] == "0.0"
    assert lines["tidemq_controller_elections"] == "0.0"
    assert lines["tidemq_controller_epoch"] == "1.0"


async def test_etcd_lost_mid_run_stops_writes_and_they_resume_when_it_returns(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster, api: BrokerAPI
) -> None:
    master = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert await wait_master(api, [master], 30) is master
    first = await api.send(master.address, send_header(TOPIC, 0), body_of(0, 100))
    assert first.status is SendStatus.SEND_OK
    etcd.kill(0)

    async def refused() -> bool:
        try:
            await api.send(master.address, send_header(TOPIC, 0), body_of(1, 100))
        except ServiceNotAvailableError as exc:
            return "etcd lease could not be renewed" in str(exc)
        return False

    await eventually(refused, "writes refused without etcd", 30, interval=0.1)
    assert "etcd unreachable" in master.log_text()
    etcd.restart(0)  # etcd keeps the lease across its restart: the master is still the master

    async def accepted() -> bool:
        try:
            sent = await api.send(master.address, send_header(TOPIC, 0), body_of(2, 100))
        except ServiceNotAvailableError:
            return False
        return sent.status is SendStatus.SEND_OK

    await eventually(accepted, "writes acknowledged again", 60, interval=0.1)
    info = await controller(api, master)
    assert info["isMaster"] and info["epoch"] == 1, info


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
    return text


async def test_elect_master_hands_the_group_over_and_the_old_master_follows(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd: EtcdCluster,
    api: BrokerAPI,
    recorder: Recorder,
) -> None:
    old = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert await wait_master(api, [old], 30) is old
    recorder.epoch(old.address, 1, as_int((await controller(api, old))["electedAtMillis"]) / 1e3)
    new = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2)
    await wait_sync_state_set(api, old, [1, 2])
    for i in range(10):
        header = send_header(TOPIC, i % 4)
        body = body_of(i, 100)
        sent = await record_send(recorder, api, old.address, header, body, broker_name=GROUP)
        assert sent.status is SendStatus.SEND_OK
    base = [str(Path(sys.executable).with_name("mqadmin")), "electMaster", "-n", namesrv.address]
    refused = await asyncio.to_thread(
        subprocess.run,
        [*base, "-b", "broker-a", "-i", "7"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 1
    assert "broker 7 is not in the SyncStateSet [1, 2]" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    done = await asyncio.to_thread(
        subprocess.run,
        [*base, "-b", "broker-a", "-i", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "#MasterBrokerId\t2" in done.stdout and "#MasterEpoch\t2" in done.stdout, done.stdout

    async def follows() -> bool:
        info = await controller(api, old)
        return not info["isMaster"] and info["masterBrokerId"] == 2

    await eventually(follows, "the old master a slave of broker 2", 30)
    recorder.epoch(new.address, 2, as_int((await controller(api, new))["electedAtMillis"]) / 1e3)
    for i in range(10, 20):
        header = send_header(TOPIC, i % 4)
        body = body_of(i, 100)
        sent = await record_send(recorder, api, new.address, header, body, broker_name=GROUP)
        assert sent.status is SendStatus.SEND_OK
    # All 20 on the new master at their positions, each acknowledged by the master of its epoch.
    await record_read(recorder, api, new.address, TOPIC, GROUP, 4)
    judged = check(recorder.events)
    assert judged.ok and judged.counts["acknowledged"] == 20, judged.summary()


async def test_a_master_serves_only_what_its_sync_state_set_has(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster, api: BrokerAPI
) -> None:
    """A message the slave of the SyncStateSet has not acknowledged is stored on the master but
    not readable there: were it read, and the master deposed before it was replicated (found by
    `make partitions`: a SIGSTOPped master's pulls answered once it resumed), the consumer would
    take its queue offset as consumed and never get the acknowledged message the new master puts
    at that offset."""
    master = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1)
    assert await wait_master(api, [master], 30) is master
    slave = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2)
    await wait_sync_state_set(api, master, [1, 2])
    first = await api.send(master.address, send_header(TOPIC, 0), body_of(0, 100))
    assert first.status is SendStatus.SEND_OK
    stored = as_int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])
    assert slave.pid is not None
    os.kill(slave.pid, signal.SIGSTOP)
    try:
        pending = asyncio.create_task(
            api.send(master.address, send_header(TOPIC, 0), body_of(1, 100), timeout=30)
        )

        async def appended() -> bool:
            info = await ha_status(api, master.address)
            return as_int(info["masterCommitLogMaxOffset"]) > stored

        await eventually(appended, "the second message stored on the master", 15)
        pulled = await api.pull(master.address, pull_header(TOPIC, 0, 1))
        assert pulled.status is not PullStatus.FOUND, [id_of(m.body) for m in pulled.messages]
        assert await api.get_max_offset(master.address, TOPIC, 0) == 1
    finally:
        os.kill(slave.pid, signal.SIGCONT)
    await pending  # acknowledged, or FLUSH_SLAVE_TIMEOUT: either way the slave has it now

    async def readable() -> bool:
        found = await api.pull(master.address, pull_header(TOPIC, 0, 1))
        return found.status is PullStatus.FOUND and id_of(found.messages[0].body) == 1

    await eventually(readable, "the second message readable once the slave has it", 30)


async def test_a_slave_serves_only_what_its_masters_sync_state_set_has(
    tmp_path: Path, processes: ProcessGroup, namesrv: Daemon, etcd: EtcdCluster, api: BrokerAPI
) -> None:
    """A slave makes readable only up to its master's confirmed offset (ha/codec.py's CONFIRM
    frames): a message one slave of the SyncStateSet lacks is on the other slave, but not
    readable there. Were it read, an election of the slave that lacks it would cut it from the
    group (the first slave truncated to the new master's log), and the consumer directed to that
    slave would have taken its queue offset as consumed."""
    stays = "haMaxTimeSlaveNotCatchup=120000"  # the paused slave stays in the set meanwhile
    master = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, stays)
    assert await wait_master(api, [master], 30) is master
    follower = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, stays)
    paused = start_member(processes, namesrv, etcd.endpoints, tmp_path, 3, stays)
    await wait_sync_state_set(api, master, [1, 2, 3])
    first = await api.send(master.address, send_header(TOPIC, 0), body_of(0, 100))
    assert first.status is SendStatus.SEND_OK

    async def served_by_follower(offset: int, number: int) -> bool:
        found = await api.pull(follower.address, pull_header(TOPIC, 0, offset))
        return found.status is PullStatus.FOUND and id_of(found.messages[0].body) == number

    await eventually(lambda: served_by_follower(0, 0), "the first message on the slave", 30)
    stored = as_int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])
    assert paused.pid is not None
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        pending = asyncio.create_task(
            api.send(master.address, send_header(TOPIC, 0), body_of(1, 100), timeout=30)
        )

        async def replicated() -> bool:
            """The follower holds the second message and dispatched all it may."""
            info = await ha_status(api, follower.address)
            return as_int(info["maxOffset"]) > stored and as_int(info["dispatchBehindBytes"]) == 0

        await eventually(replicated, "the second message on the slave, dispatch done", 15)
        pulled = await api.pull(follower.address, pull_header(TOPIC, 0, 1))
        assert pulled.status is not PullStatus.FOUND, [id_of(m.body) for m in pulled.messages]
        assert await api.get_max_offset(follower.address, TOPIC, 0) == 1
        assert (await ha_status(api, follower.address))["confirmedOffset"] == stored
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    await pending  # acknowledged, or FLUSH_SLAVE_TIMEOUT: either way the set has it now
    await eventually(lambda: served_by_follower(1, 1), "the second message readable there", 30)


async def test_what_a_slave_served_is_never_cut_by_the_next_election(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd: EtcdCluster,
    api: BrokerAPI,
    recorder: Recorder,
) -> None:
    """The case the confirmed offset exists for, to its end, judged by the history checker: a
    message the master and one slave hold but the third member (down, still in the set) lacks;
    a consumer reads that slave; master and that slave die, the third member comes back, is
    elected without the message and puts another at its offset; the slave rejoins and cuts it.
    What the consumer read must be the group's log after healing (the order rule: a read the
    final log does not hold there). Without the confirmed offset the follower served body 1,
    which the new master replaced by body 2 at offset 1."""
    stays = "haMaxTimeSlaveNotCatchup=120000"  # the member that is down stays in the set
    master = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, stays)
    assert await wait_master(api, [master], 30) is master
    recorder.epoch(
        master.address, 1, as_int((await controller(api, master))["electedAtMillis"]) / 1000
    )
    follower = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, stays)
    lacking = start_member(processes, namesrv, etcd.endpoints, tmp_path, 3, stays)
    await wait_sync_state_set(api, master, [1, 2, 3])
    header = send_header(TOPIC, 0)
    assert (await record_send(recorder, api, master.address, header, body_of(0, 100),
                              broker_name=GROUP)).status is SendStatus.SEND_OK  # fmt: skip
    stored = as_int((await ha_status(api, master.address))["masterCommitLogMaxOffset"])
    lacking.kill()  # stopped, it would still read what its socket holds when resumed
    try:
        pending = asyncio.create_task(
            record_send(recorder, api, master.address, header, body_of(1, 100),
                        broker_name=GROUP, timeout=30)
        )  # fmt: skip

        async def replicated() -> bool:
            info = await ha_status(api, follower.address)
            return as_int(info["maxOffset"]) > stored and as_int(info["dispatchBehindBytes"]) == 0

        await eventually(replicated, "the second message on the follower, dispatch done", 15)
        # A consumer directed to the follower (a master away, a slow consumer) reads queue 0.
        op = recorder.invoke("poll", session=1, group="FollowerReader")
        pulled = await api.pull(follower.address, pull_header(TOPIC, 0, 0))
        read = [[TOPIC, GROUP, 0, m.queue_offset, id_of(m.body)] for m in pulled.messages]
        recorder.complete(op, "ok", "poll", messages=read)
    finally:
        master.kill()
        follower.kill()
    with contextlib.suppress(TideMQError):
        await pending  # the master died before the member that lacks it could acknowledge
    lacking = start_member(processes, namesrv, etcd.endpoints, tmp_path, 3, stays)
    assert await wait_master(api, [lacking], 30) is lacking
    info = await controller(api, lacking)
    recorder.epoch(lacking.address, int(info["epoch"]), as_int(info["electedAtMillis"]) / 1000)
    after = await record_send(
        recorder, api, lacking.address, header, body_of(2, 100), broker_name=GROUP
    )
    assert after.status is SendStatus.SEND_OK and after.queue_offset == 1  # where body 1 was
    rejoined = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, stays)
    await wait_sync_state_set(api, lacking, [2, 3])
    await record_read(recorder, api, lacking.address, TOPIC, GROUP, 4)
    judged = check(recorder.events)
    print(f"the follower served {len(read)} messages:\n{judged.summary()}")
    assert judged.ok, judged.summary()
    assert "go to .diverged files" in rejoined.log_text()  # the follower cut body 1
