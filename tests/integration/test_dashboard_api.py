"""The admin API the dashboard added (subscription groups, search by time, messages by time
range, skip backlog, dead-letter resend), the dashboard's JSON API and its start-up errors,
against a real name server and broker (one of each per test, on free ports).

The pages themselves are driven in a browser by test_dashboard_browser.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.processes import LOOPBACK, Daemon, ProcessGroup, free_port
from tidemq import AsyncProducer, AsyncPushConsumer, ConsumeResult
from tidemq.client.admin.api import AdminClient
from tidemq.client.config import ClientConfig
from tidemq.client.dashboard import main as dashboard_main
from tidemq.client.dashboard.cli import READY_PREFIX, command_line
from tidemq.client.errors import ClientError, TideMQError
from tidemq.client.inflate import readable_body
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.protocol.headers import ConsumerSendMsgBackRequestHeader
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import MASTER_ID, SubscriptionGroupConfig, TopicConfig
from tidemq.client.remoting.signing import SessionCredentials
from tidemq.store.layout import FLAG_COMPRESSED

GROUP = "dash_group"
ADMIN = SessionCredentials("dash-admin", "dash-admin-secret")
WRONG = SessionCredentials("dash-admin", "not-the-secret")
ACL_FILE = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
"""


async def _broker(processes: ProcessGroup, namesrv: Daemon, tmp_path: Path) -> Daemon:
    return processes.brokerd(namesrv.address, tmp_path / "store", name="brokerd")


async def _topic(admin: AdminClient, broker: Daemon, topic: str, queues: int = 2) -> None:
    await admin.create_topic(broker.address, TopicConfig(topic, queues, queues))

    async def routed() -> bool:
        try:
            await admin.topic_route(topic)
        except TideMQError:
            return False
        return True

    await eventually(routed, f"a route for {topic}", timeout=15)


async def _send(admin: AdminClient, topic: str, count: int, key: str = "") -> list[str]:
    ids = []
    for i in range(count):
        _, _, result = await admin.send_message(Message(topic, f"m{i}".encode(), keys=key or None))
        ids.append(result.msg_id)
    return ids


async def test_groups_search_by_time_skip_backlog_and_dead_letter_resend(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = await _broker(processes, namesrv, tmp_path)
    async with AdminClient(namesrv.address) as admin:
        await _topic(admin, broker, "TimeTopic")
        await admin.update_subscription_group(broker.address, SubscriptionGroupConfig(GROUP))
        groups = await admin.examine_groups()
        assert GROUP in groups
        assert groups[GROUP].retry_max_times == SubscriptionGroupConfig(GROUP).retry_max_times
        assert GROUP in await admin.subscription_groups(broker.address)

        await _send(admin, "TimeTopic", 3)
        middle = int(time.time() * 1000)
        await eventually(lambda: int(time.time() * 1000) > middle + 5, "the clock to move")
        later = await _send(admin, "TimeTopic", 4)
        end = int(time.time() * 1000) + 1000

        found, truncated = await admin.messages_by_time("TimeTopic", middle + 1, end)
        assert not truncated
        assert sorted(m.msg_id for _, m in found) == sorted(later)
        stamps = [m.store_timestamp for _, m in found]
        assert stamps == sorted(stamps, reverse=True)
        everything, _ = await admin.messages_by_time("TimeTopic", 0, end)
        assert len(everything) == 7
        capped, truncated = await admin.messages_by_time("TimeTopic", 0, end, limit=5)
        assert truncated and len(capped) == 5
        assert {m.msg_id for _, m in capped} >= set(later[-2:])  # the newest are kept

        # A long range in one queue: only its newest messages are read.
        await _topic(admin, broker, "OneQueue", queues=1)
        one = await _send(admin, "OneQueue", 10)
        newest, truncated = await admin.messages_by_time("OneQueue", 0, end + 5000, limit=4)
        assert truncated
        assert [m.msg_id for _, m in newest] == one[::-1][:4]
        whole, truncated = await admin.messages_by_time("OneQueue", 0, end + 5000, limit=10)
        assert not truncated and [m.msg_id for _, m in whole] == one[::-1]

        # The group's offsets: from nothing to the end of every queue, then back by time.
        skipped = await admin.skip_backlog(GROUP, "TimeTopic")
        assert sum(skipped.values()) == 7
        assert (await admin.examine_consume_stats(GROUP, "TimeTopic")).total_diff() == 0
        await admin.reset_offset_by_time(GROUP, "TimeTopic", middle + 1)
        assert (await admin.examine_consume_stats(GROUP, "TimeTopic")).total_diff() == 4

        # A message sent back with a negative delay level goes to %DLQ%<group>; resent, a copy
        # lands in the topic it came from, its key and body kept.
        (dead_id,) = await _send(admin, "TimeTopic", 1, key="dead-key")
        dead = await admin.view_message(dead_id)
        header = ConsumerSendMsgBackRequestHeader(
            offset=dead.physical_offset,
            group=GROUP,
            delay_level=-1,
            origin_msg_id=dead_id,
            origin_topic="TimeTopic",
        )
        await admin.api.consumer_send_msg_back(broker.address, header)
        dlq = f"%DLQ%{GROUP}"

        async def dead_letter() -> list[str]:
            try:
                return [m.msg_id for _, m in await admin.query_message(dlq, "dead-key")]
            except TideMQError:  # no route yet
                return []

        await eventually(dead_letter, "the message in the dead-letter queue", timeout=15)
        (letter_id,) = await dead_letter()
        with pytest.raises(ClientError, match="not a dead-letter queue"):
            await admin.resend_dead_letter(dead_id)
        _, _, result = await admin.resend_dead_letter(letter_id)
        resent = await admin.view_message(result.msg_id)
        assert resent.topic == "TimeTopic"
        assert bytes(resent.body) == bytes(dead.body)
        assert resent.keys == "dead-key"
        assert "RETRY_TOPIC" not in resent.properties


# --- the dashboard process ------------------------------------------------------------------


def dashboard_command(namesrv: str, port: int, *extra: str) -> list[str]:
    return command_line(namesrv, port, LOOPBACK, "--interval", "0.5", *extra)


def _request(
    method: str,
    url: str,
    body: object = None,
    content_type: str = "application/json",
    host: str | None = None,
) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if host is not None:
        request.add_header("Host", host)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _one_line_failure(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_operator_mistakes_get_one_line(
    namesrv: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    silent = f"{LOOPBACK}:{free_port()}"
    line = _one_line_failure(dashboard_command(silent, 0))
    assert line.startswith(f"tidemq-dashboard: name server {silent} does not answer")
    with socket.socket() as holder:
        holder.bind((LOOPBACK, 0))
        holder.listen()
        busy = holder.getsockname()[1]
        line = _one_line_failure(dashboard_command(namesrv.address, busy))
    assert f"cannot listen on 127.0.0.1:{busy}: the port is in use" in line

    # Mistakes found before anything is started: the same one line, checked in-process.
    for args, expected in (
        (["--port", "http"], "--port must be a number from 0 to 65535, not 'http'"),
        (["--ak", "only-the-key"], "give both --ak and --sk"),
        (["--interval", "0"], "Invalid value for '--interval'"),
    ):
        with pytest.raises(SystemExit) as exited:
            dashboard_main(["--namesrv", namesrv.address, *args])
        assert exited.value.code == 1
        err = capsys.readouterr().err
        assert err.startswith("tidemq-dashboard: ") and expected in err
        assert len(err.strip().splitlines()) == 1, err
    with pytest.raises(SystemExit):
        dashboard_main(["--port", "0"])
    assert capsys.readouterr().err == "tidemq-dashboard: Missing option '-n' / '--namesrv'.\n"


def test_read_only_api_refuses_writes_and_admin_api_writes(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store", name="brokerd")
    read_only_port, admin_port = free_port(), free_port()
    processes.start(
        dashboard_command(namesrv.address, read_only_port, "--read-only"),
        port=read_only_port,
        name="dashboard-ro",
        ready_text=READY_PREFIX,
    )
    processes.start(
        dashboard_command(namesrv.address, admin_port, "--ak", "admin", "--sk", "secret12"),
        port=admin_port,
        name="dashboard-admin",
        ready_text=READY_PREFIX,
    )
    ro, rw = f"http://{LOOPBACK}:{read_only_port}", f"http://{LOOPBACK}:{admin_port}"
    assert _request("GET", f"{ro}/api/overview")[1] == {
        "namesrv": namesrv.address,
        "writable": False,
        "why": "started with --read-only",
    }
    status, body = _request("POST", f"{ro}/api/topics", {"topic": "RoTopic"})
    assert (status, body) == (403, {"error": "read-only dashboard: started with --read-only"})

    status, body = _request(
        "POST", f"{rw}/api/topics", {"topic": "RwTopic", "readQueueNums": 3, "writeQueueNums": 3}
    )
    assert status == 200, body
    assert body == {"topic": "RwTopic", "brokers": [broker.address]}
    # A page of another site whose name resolves to 127.0.0.1 (DNS rebinding) is not answered.
    status, body = _request("GET", f"{ro}/api/cluster", host=f"evil.example:{read_only_port}")
    assert status == 403 and isinstance(body, dict)
    assert body["error"] == (
        f"this dashboard answers requests to localhost only, not evil.example:{read_only_port}"
    )
    assert _request("GET", f"{ro}/api/overview", host=f"localhost:{read_only_port}")[0] == 200
    # What another site's page could send from the operator's browser without a preflight.
    status, body = _request("POST", f"{rw}/api/topics", {"topic": "Csrf"}, "text/plain")
    assert status == 415 and isinstance(body, dict) and "JSON body" in body["error"]
    status, body = _request("POST", f"{rw}/api/topics", {"topic": "Bad", "perm": "X"})
    assert (status, body) == (400, {"error": "perm must be R, W or RW"})
    status, body = _request("GET", f"{rw}/api/topics/NoSuchTopic")
    assert status == 404
    status, body = _request("GET", f"{rw}/api/messages?topic=RwTopic&begin=x&end=1")
    assert (status, body) == (400, {"error": "begin must be a whole number, not 'x'"})

    def routed() -> bool:
        return _request("GET", f"{rw}/api/topics/RwTopic")[0] == 200

    deadline = time.monotonic() + 15
    while not routed():
        assert time.monotonic() < deadline, "RwTopic never got a route"
        time.sleep(0.1)
    status, sent = _request("POST", f"{rw}/api/topics/RwTopic/send", {"body": "hi", "keys": "k1"})
    assert status == 200 and isinstance(sent, dict) and sent["status"] == "SEND_OK"
    status, topic = _request("GET", f"{rw}/api/topics/RwTopic")
    assert isinstance(topic, dict)
    assert topic["messages"] == 1
    assert [q["writeQueueNums"] for q in topic["route"]["queues"]] == [3]
    assert topic["route"]["brokers"][0]["addresses"] == {str(MASTER_ID): broker.address}
    status, by_id = _request("GET", f"{rw}/api/messages/by-id?id={sent['offsetMsgId']}")
    assert status == 200 and isinstance(by_id, dict)
    assert (by_id["body"], by_id["keys"], by_id["deadLetter"]) == ("hi", "k1", False)
    status, deleted = _request("DELETE", f"{rw}/api/topics/RwTopic")
    assert status == 200, deleted
    names = _request("GET", f"{rw}/api/topics")[1]
    assert isinstance(names, dict)
    assert not {"RwTopic", "Csrf", "RoTopic", "Bad"} & {t["topic"] for t in names["topics"]}


def _start_dashboard(processes: ProcessGroup, namesrv: str, name: str, *args: str) -> str:
    port = free_port()
    command = [*command_line(namesrv, port, LOOPBACK, "--interval", "0.5"), *args]
    processes.start(command, port=port, name=name, ready_text=READY_PREFIX)
    return f"http://{LOOPBACK}:{port}"


def test_without_an_account_it_writes_only_on_loopback_to_a_cluster_without_acl(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """What `make run` starts: no account, 127.0.0.1, brokers without ACL: writable. Bound to
    every address it is read-only (no login guards it); the ACL case is the next test's."""
    broker = processes.brokerd(namesrv.address, tmp_path / "store", name="brokerd")
    local = _start_dashboard(processes, namesrv.address, "dashboard-local")
    assert _request("GET", f"{local}/api/overview")[1] == {
        "namesrv": namesrv.address,
        "writable": True,
        "why": "no broker checks ACL and it listens on loopback only",
    }
    status, body = _request("POST", f"{local}/api/topics", {"topic": "OpenTopic"})
    assert (status, body) == (200, {"topic": "OpenTopic", "brokers": [broker.address]})
    status, acl = _request("GET", f"{local}/api/acl")
    assert status == 200 and isinstance(acl, dict)
    assert [(b["address"], b["acl"]) for b in acl["brokers"]] == [(broker.address, "off")]
    status, configs = _request("GET", f"{local}/api/brokers/config")
    assert status == 200 and isinstance(configs, dict)
    assert configs["brokers"][0]["config"]["brokerRole"] == "ASYNC_MASTER"
    change = {"address": broker.address, "key": "flushConsumerOffsetInterval", "value": "7000"}
    assert _request("POST", f"{local}/api/brokers/config", change) == (
        200,
        {"address": broker.address, "key": "flushConsumerOffsetInterval", "value": "7000"},
    )
    stranger = {**change, "address": "127.0.0.1:1"}
    assert _request("POST", f"{local}/api/brokers/config", stranger) == (
        400,
        {"error": "127.0.0.1:1 is not a broker of this cluster"},
    )
    status, found = _request("GET", f"{local}/api/producers?topic=OpenTopic&group=NoGroup")
    assert (status, found) == (200, {"topic": "OpenTopic", "group": "NoGroup", "producers": []})

    port = free_port()
    command = command_line(namesrv.address, port, "0.0.0.0", "--interval", "0.5")
    processes.start(command, port=port, name="dashboard-everywhere", ready_text=READY_PREFIX)
    everywhere = f"http://{LOOPBACK}:{port}"
    overview = _request("GET", f"{everywhere}/api/overview")[1]
    assert overview == {
        "namesrv": namesrv.address,
        "writable": False,
        "why": "it listens on 0.0.0.0 without an account: --bind 127.0.0.1, or --ak/--sk",
    }
    status, body = _request("POST", f"{everywhere}/api/topics", {"topic": "Refused"})
    assert status == 403 and isinstance(body, dict)
    assert body["error"].startswith("read-only dashboard: it listens on 0.0.0.0")


def test_with_acl_the_dashboard_signs_as_its_account(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    broker = processes.brokerd(
        namesrv.address, tmp_path / "store", "aclEnable=true", f"aclFile={acl_file}"
    )
    urls = {}
    for name, credentials, extra in (
        ("admin", ADMIN, ()),
        ("reader", ADMIN, ("--read-only",)),
        ("wrong", WRONG, ()),
    ):
        port = free_port()
        keys = ("--ak", credentials.access_key, "--sk", credentials.secret_key, *extra)
        processes.start(
            dashboard_command(namesrv.address, port, *keys),
            port=port,
            name=f"dashboard-{name}",
            ready_text=READY_PREFIX,
        )
        urls[name] = f"http://{LOOPBACK}:{port}"

    status, body = _request("POST", f"{urls['admin']}/api/topics", {"topic": "AclDashTopic"})
    assert (status, body) == (200, {"topic": "AclDashTopic", "brokers": [broker.address]})
    status, cluster = _request("GET", f"{urls['reader']}/api/cluster")
    assert status == 200 and isinstance(cluster, dict)
    assert [b.get("role") for b in cluster["brokers"]] == ["ASYNC_MASTER"]
    status, body = _request("POST", f"{urls['reader']}/api/topics", {"topic": "Refused"})
    assert status == 403 and isinstance(body, dict) and "read-only" in body["error"]
    status, body = _request("POST", f"{urls['wrong']}/api/topics", {"topic": "Refused"})
    assert status == 502 and isinstance(body, dict)
    assert "Check signature failed" in body["error"]
    # Without an account, on loopback: the brokers check ACL, so it is read-only.
    anonymous = _start_dashboard(processes, namesrv.address, "dashboard-anonymous")
    overview = _request("GET", f"{anonymous}/api/overview")[1]
    assert isinstance(overview, dict) and overview["writable"] is False
    assert overview["why"] in (
        "brokers broker-a/0 check ACL: start it with --ak/--sk",
        "brokers broker-a/0 did not say whether they check ACL",
    )
    status, acl = _request("GET", f"{urls['admin']}/api/acl")
    assert status == 200 and isinstance(acl, dict)
    assert [(b["acl"], b["aclFile"]) for b in acl["brokers"]] == [("on", str(acl_file))]


async def test_compressed_bodies_and_trace_batches_read_as_their_producers_gave_them(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    """A 12,000-byte body is compressed by its producer (over 4 KiB), and so are trace
    batches over 4 KiB: the API shows the body and its size as sent, the consumer's trace
    records, and a compressed dead letter resends as it was sent."""
    broker = processes.brokerd(
        namesrv.address, tmp_path / "store", "traceTopicEnable=true", name="brokerd"
    )
    port = free_port()
    processes.start(
        dashboard_command(namesrv.address, port),
        port=port,
        name="dashboard",
        ready_text=READY_PREFIX,
    )
    url = f"http://{LOOPBACK}:{port}"
    text = "twelve thousand bytes " * 546  # 12,012 bytes
    big_key = "big-" + "k" * 4200  # every trace record over 4 KiB
    config = ClientConfig.create(namesrv.address, poll_name_server_interval=1.0)
    async with AdminClient(namesrv.address) as admin:
        await _topic(admin, broker, "BigTopic")
        async with AsyncProducer("P-big", config=config, enable_trace=True) as producer:
            sent = await producer.send(Message("BigTopic", text.encode(), keys=big_key))
        consumed: list[bytes] = []

        async def listener(msg: ReceivedMessage) -> ConsumeResult:
            consumed.append(msg.body)
            return ConsumeResult.SUCCESS

        consumer = AsyncPushConsumer(
            "G-big",
            config=config,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            enable_trace=True,
        )
        consumer.subscribe("BigTopic", "*", listener)
        await consumer.start()
        try:
            await eventually(lambda: consumed == [text.encode()], "the big message consumed", 30)
        finally:
            await consumer.shutdown()
        stored = await admin.view_message(sent.offset_msg_id)
        assert stored.sys_flag & FLAG_COMPRESSED and len(stored.body) < 1000  # as stored

        get = partial(asyncio.to_thread, _request, "GET")
        status, by_id = await get(f"{url}/api/messages/by-id?id={sent.offset_msg_id}")
        assert status == 200 and isinstance(by_id, dict), by_id
        assert by_id["bodySize"] == len(text) and by_id["bodyTruncated"]
        assert by_id["body"] == text[:2048]
        status, by_key = await get(f"{url}/api/messages/by-key?topic=BigTopic&key={big_key}")
        assert isinstance(by_key, dict), by_key
        assert [m["bodySize"] for m in by_key["messages"]] == [len(text)]
        status, page = await get(f"{url}/api/messages?topic=BigTopic&begin=0&end={2**62}")
        assert isinstance(page, dict), page
        assert [m["bodySize"] for m in page["messages"]] == [len(text)]

        trace: dict[str, Any] = {}

        async def whole_trace() -> bool:
            nonlocal trace
            status, body = await get(f"{url}/api/messages/trace?id={sent.msg_id}")
            trace = body if status == 200 and isinstance(body, dict) else {}
            return [r["type"] for r in trace.get("records", [])] == [
                "Pub",
                "SubBefore",
                "SubAfter",
            ]

        await eventually(whole_trace, "the Pub, SubBefore and SubAfter records", 30)
        assert trace["skipped"] == []
        assert {r["group"] for r in trace["records"]} == {"P-big", "G-big"}

        # A compressed message sent to the dead-letter queue and resent: its body as sent.
        await admin.update_subscription_group(broker.address, SubscriptionGroupConfig(GROUP))
        header = ConsumerSendMsgBackRequestHeader(
            offset=stored.physical_offset,
            group=GROUP,
            delay_level=-1,
            origin_msg_id=sent.offset_msg_id,
            origin_topic="BigTopic",
        )
        await admin.api.consumer_send_msg_back(broker.address, header)

        async def dead_letter() -> list[str]:
            try:
                found = await admin.query_message(f"%DLQ%{GROUP}", big_key)
            except TideMQError:  # no route yet
                return []
            return [m.msg_id for _, m in found]

        await eventually(dead_letter, "the message in the dead-letter queue", timeout=15)
        (letter_id,) = await dead_letter()
        _, _, result = await admin.resend_dead_letter(letter_id)
        resent = await admin.view_message(result.msg_id)
        assert readable_body(resent).data == text.encode()
