"""Plain ACL on real processes: a broker with `aclEnable=true` and an `aclFile`, the RocketMQ C++
client (`set_session_credentials`) and our clients with right, wrong and no credentials, DENY,
admin-only requests, white lists, and the file edited while the broker runs.

What a refused send did not write is checked: the topic's queues stay empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.conditions import eventually
from tests.support.cpp_peers import LINGER, SEND_OK, run_peer
from tests.support.processes import Daemon, DaemonError, ProcessGroup
from tidemq.client.admin.api import AdminClient
from tidemq.client.api import BrokerAPI
from tidemq.client.consumer.pull import AsyncPullConsumer
from tidemq.client.errors import BrokerResponseError
from tidemq.client.message import Message
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.signing import SessionCredentials

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(240)]

USER = SessionCredentials("producer-key", "producer-secret")
ADMIN = SessionCredentials("admin-key1", "admin-secret")
WRONG = SessionCredentials("producer-key", "not-the-secret")
TOPIC = "acl-topic"
DENIED = "denied-topic"
GROUP = "acl-group"
ACL_FILE = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
      - {DENIED}=DENY
      - TBW102=PUB|SUB
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
"""
REFUSED_CONSUME_TIMEOUT = 6.0  # a refused C++ consumer gets nothing: wait this long for it


@dataclass
class AclBroker:
    namesrv: Daemon
    broker: Daemon
    acl_file: Path

    def edit(self, text: str) -> None:
        """Replace the file's content in one rename, as editors save."""
        staged = self.acl_file.with_suffix(".new")
        staged.write_text(text)
        os.replace(staged, self.acl_file)


@contextlib.asynccontextmanager
async def admin_client(
    namesrv: Daemon, credentials: SessionCredentials
) -> AsyncIterator[AdminClient]:
    admin = AdminClient(
        namesrv.address, access_key=credentials.access_key, secret_key=credentials.secret_key
    )
    try:
        yield admin
    finally:
        await admin.close()


async def start_acl_broker(processes: ProcessGroup, namesrv: Daemon, tmp_path: Path) -> AclBroker:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    broker = processes.brokerd(
        namesrv.address, tmp_path / "store", "aclEnable=true", f"aclFile={acl_file}"
    )
    async with admin_client(namesrv, ADMIN) as admin:
        for topic in (TOPIC, DENIED):
            await admin.create_topic(broker.address, TopicConfig(topic, 2, 2))

        async def routed() -> bool:
            return all([await admin.api.get_route(namesrv.address, t) for t in (TOPIC, DENIED)])

        await eventually(routed, "the routes of the test topics", 15)
    return AclBroker(namesrv, broker, acl_file)


@pytest.fixture
async def acl(processes: ProcessGroup, namesrv: Daemon, tmp_path: Path) -> AclBroker:
    return await start_acl_broker(processes, namesrv, tmp_path)


async def stored_count(acl: AclBroker, topic: str) -> int:
    """Messages the broker holds for `topic` (max offsets of its queues, asked as admin)."""
    async with admin_client(acl.namesrv, ADMIN) as admin:
        stats = await admin.topic_stats(acl.broker.address, topic)
    return sum(offset.max_offset for offset in stats.offset_table.values())


def producer(acl: AclBroker, credentials: SessionCredentials | None) -> AsyncProducer:
    keys: dict[str, Any] = {}
    if credentials is not None:
        keys = {"access_key": credentials.access_key, "secret_key": credentials.secret_key}
    return AsyncProducer("acl-producer", acl.namesrv.address, retry_times=0, **keys)


async def send_one(acl: AclBroker, credentials: SessionCredentials | None, topic: str) -> str:
    """'ok', or the remark of the refusal."""
    p = producer(acl, credentials)
    await p.start()
    try:
        await p.send(Message(topic, b"hello"))
    except BrokerResponseError as exc:
        return exc.remark or ""
    finally:
        await p.shutdown()
    return "ok"


def cpp_spec(
    acl: AclBroker, op: str, topic: str, credentials: SessionCredentials | None, **more: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {"op": op, "namesrv": acl.namesrv.address, "topic": topic, **more}
    if credentials is not None:
        spec["credentials"] = [credentials.access_key, credentials.secret_key, "LOCAL"]
    return spec


async def cpp_send(
    tmp_path: Path, acl: AclBroker, topic: str, credentials: SessionCredentials | None
) -> list[dict[str, Any]]:
    spec = cpp_spec(
        acl, "produce", topic, credentials, group="PG-acl", messages=[{"body": "from cpp"}]
    )
    return await run_peer(tmp_path, spec, must_succeed=False)


async def cpp_consume(
    tmp_path: Path,
    acl: AclBroker,
    topic: str,
    credentials: SessionCredentials | None,
    expect: int,
    timeout: float,
) -> list[dict[str, Any]]:
    spec = cpp_spec(
        acl, "consume", topic, credentials, group=GROUP, expect=expect, timeout=timeout,
        linger=LINGER,
    )  # fmt: skip
    events = await run_peer(tmp_path, spec)
    return [e for e in events if e["event"] == "received"]


def require_cpp_client() -> None:
    pytest.importorskip(
        "rocketmq.client",
        reason="the RocketMQ C++ client (rocketmq==0.4.4, x86_64 Linux only) cannot be imported",
        exc_type=ImportError,
    )


# --- the RocketMQ C++ client ------------------------------------------------------------------


async def test_cpp_client_with_credentials_sends_and_consumes(
    acl: AclBroker, tmp_path: Path
) -> None:
    require_cpp_client()
    events = await cpp_send(tmp_path, acl, TOPIC, USER)
    assert [e["status"] for e in events if e["event"] == "sent"] == [SEND_OK], events
    received = await cpp_consume(tmp_path, acl, TOPIC, USER, expect=1, timeout=25)
    assert [e["body"] for e in received] == ["from cpp"]


@pytest.mark.parametrize(
    ("credentials", "topic"),
    [(WRONG, TOPIC), (None, TOPIC), (USER, DENIED)],
    ids=["wrong-secret", "no-credentials", "deny"],
)
async def test_cpp_client_refused(
    acl: AclBroker, tmp_path: Path, credentials: SessionCredentials | None, topic: str
) -> None:
    require_cpp_client()
    events = await cpp_send(tmp_path, acl, topic, credentials)
    assert not [e for e in events if e["event"] == "sent" and e["status"] == SEND_OK]
    assert [e["event"] for e in events][-1] == "error", events
    assert await stored_count(acl, topic) == 0
    # A message there to consume: sent by the admin account.
    async with admin_client(acl.namesrv, ADMIN) as admin:
        await admin.send_message(Message(topic, b"for nobody"))
    received = await cpp_consume(
        tmp_path, acl, topic, credentials, expect=1, timeout=REFUSED_CONSUME_TIMEOUT
    )
    assert received == []
    assert "ACL refused" in acl.broker.log_text()
    assert USER.secret_key not in acl.broker.log_text()


# --- our client -----------------------------------------------------------------------------


async def test_our_client_with_right_wrong_and_no_credentials(acl: AclBroker) -> None:
    assert await send_one(acl, USER, TOPIC) == "ok"
    refused = await send_one(acl, WRONG, TOPIC)
    assert refused.endswith("Check signature failed for accessKey=producer-key")
    assert refused.startswith("org.apache.rocketmq.acl.common.AclException: ")
    assert (await send_one(acl, None, TOPIC)).endswith("No accessKey is configured")
    assert (await send_one(acl, USER, DENIED)).endswith(f"No default permission for topic:{DENIED}")
    assert await stored_count(acl, TOPIC) == 1
    assert await stored_count(acl, DENIED) == 0

    consumer = AsyncPullConsumer(
        GROUP,
        acl.namesrv.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        access_key=USER.access_key,
        secret_key=USER.secret_key,
    )
    consumer.subscribe(TOPIC)
    await consumer.start()
    try:
        got: list[bytes] = []

        async def polled() -> bool:
            got.extend(m.body for m in await consumer.poll(0.2))
            return bool(got)

        await eventually(polled, "the message polled with credentials", 15)
        assert got == [b"hello"]
    finally:
        await consumer.shutdown()


async def test_a_producers_signed_sends_on_an_open_connection_are_checked(acl: AclBroker) -> None:
    # After the first send the connection is open: the sends' frame heads are written signed from
    # the topic's template (send_frame.encode_signed_send_head), not from a signed command.
    for credentials, outcome in ((USER, "ok"), (WRONG, "Check signature failed")):
        p = producer(acl, credentials)
        await p.start()
        outcomes: list[str] = []
        try:
            for n in range(12):
                try:
                    await p.send(Message(TOPIC, b"signed %d" % n, properties={"n": str(n)}))
                    outcomes.append("ok")
                except BrokerResponseError as exc:
                    outcomes.append(exc.remark or "")
            assert p.instance.api._signed_templates, "no send took the signed template's path"
        finally:
            await p.shutdown()
        assert all(outcome in o for o in outcomes), outcomes
    assert await stored_count(acl, TOPIC) == 12


async def test_admin_requests_need_an_admin_account(acl: AclBroker) -> None:
    async with admin_client(acl.namesrv, USER) as user:
        with pytest.raises(BrokerResponseError, match="Need admin permission for request code=17"):
            await user.create_topic(acl.broker.address, TopicConfig("made-by-user", 1, 1))
        with pytest.raises(BrokerResponseError, match="Need admin permission"):
            await user.delete_topic_in_broker(acl.broker.address, TOPIC)
    async with admin_client(acl.namesrv, ADMIN) as admin:
        await admin.create_topic(acl.broker.address, TopicConfig("made-by-admin", 1, 1))


def mqadmin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("mqadmin")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


async def test_mqadmin_signs_with_ak_sk_or_environment(acl: AclBroker) -> None:
    base = ["updateTopic", "-n", acl.namesrv.address, "-b", acl.broker.address]
    user = ["--ak", USER.access_key, "--sk", USER.secret_key]
    refused = await asyncio.to_thread(mqadmin, *base, "-t", "by-mqadmin", *user)
    assert refused.returncode == 1
    assert "Need admin permission" in refused.stderr
    env = {"TIDEMQ_ACCESS_KEY": ADMIN.access_key, "TIDEMQ_SECRET_KEY": ADMIN.secret_key}
    done = await asyncio.to_thread(mqadmin, *base, "-t", "by-mqadmin", env=env)
    assert done.returncode == 0, done.stderr


# --- white lists and live edits ---------------------------------------------------------------


async def test_white_lists_and_live_edits(acl: AclBroker) -> None:
    # Unlisted: an unsigned client is refused.
    assert (await send_one(acl, None, TOPIC)).endswith("No accessKey is configured")
    # The account's white address: its requests pass without a signature.
    acl.edit(ACL_FILE.replace("    defaultTopicPerm: DENY", "    whiteRemoteAddress: 127.0.0.*\n"
                              "    defaultTopicPerm: DENY", 1))  # fmt: skip
    await eventually(lambda: _sent(acl, WRONG, TOPIC), "the account's white address", 10)
    # The global white list: even without an access key.
    acl.edit(ACL_FILE.replace("globalWhiteRemoteAddresses: []", "globalWhiteRemoteAddresses:\n"
                              "  - 127.0.0.1"))  # fmt: skip
    await eventually(lambda: _sent(acl, None, DENIED), "the global white list to apply", 10)
    # Back to the original: the unsigned client is refused again, without a restart.
    acl.edit(ACL_FILE)
    await eventually(lambda: _refused(acl, None, TOPIC), "the white list to go", 10)


async def _sent(acl: AclBroker, credentials: SessionCredentials | None, topic: str) -> bool:
    return await send_one(acl, credentials, topic) == "ok"


async def _refused(acl: AclBroker, credentials: SessionCredentials | None, topic: str) -> bool:
    return await send_one(acl, credentials, topic) != "ok"


async def test_editing_permissions_live_and_a_broken_edit_keeps_the_old_rules(
    acl: AclBroker,
) -> None:
    assert (await send_one(acl, USER, DENIED)).endswith(
        "No default permission for topic:denied-topic"
    )
    acl.edit(ACL_FILE.replace(f"{DENIED}=DENY", f"{DENIED}=PUB"))
    waited = await eventually(lambda: _sent(acl, USER, DENIED), "PUB on the topic to apply", 10)
    assert waited < 5
    acl.edit(ACL_FILE.replace(f"{DENIED}=DENY", f"{DENIED}=PUBLISH"))
    await eventually(
        lambda: "keeping the previous rules" in acl.broker.log_text(), "the broken edit's log", 10
    )
    assert await send_one(acl, USER, DENIED) == "ok"
    acl.edit("accounts: [")  # not YAML
    await eventually(
        lambda: acl.broker.log_text().count("keeping the previous rules") == 2,
        "the second broken edit's log",
        10,
    )
    assert await send_one(acl, USER, DENIED) == "ok"
    assert acl.broker.running
    acl.edit(ACL_FILE)
    await eventually(lambda: _refused(acl, USER, DENIED), "DENY to apply again", 10)


async def test_a_bad_acl_file_stops_start_up(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts: [{accessKey: short, secretKey: '12345678'}]")
    with pytest.raises(DaemonError, match="exited with status 1") as raised:
        processes.brokerd(
            namesrv.address, tmp_path / "store", "aclEnable=true", f"aclFile={acl_file}"
        )
    assert f"brokerd: aclFile: {acl_file}: accounts[0]: accessKey must be longer" in str(
        raised.value
    )


async def test_acl_off_broker_takes_unsigned_requests(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "store")
    api = BrokerAPI()
    try:
        await api.create_topic(broker.address, TopicConfig("plain", 1, 1))
    finally:
        await api.close()
