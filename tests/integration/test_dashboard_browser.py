"""The dashboard's pages in headless Chromium against a real cluster: a name server, a master
and its slave (brokerd processes on free ports), `tidemq-dashboard` as a process with an admin
account, a second one --read-only and a third without an account on loopback (writable: the
cluster has no ACL, as under `make run`).

Every page is opened, checked for the cluster's numbers (a topic created in the page is routed;
a group's lag after N sends is N; a reset offset moves the group's offsets, checked through the
admin API; the live chart of a topic gains points and shows its sends) and saved as a
screenshot in screenshots/dashboard/ (git-ignored). Without Chromium the module is skipped with
one reason; under CI a missing Chromium fails instead (`make install` installs it there).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.support.browser import chromium_paths, headless_chrome
from tests.support.conditions import eventually_sync
from tests.support.ha_processes import start_master, start_slave
from tests.support.processes import LOOPBACK, REPO_ROOT, Daemon, ProcessGroup, free_port
from tests.support.rmq5_clients import Rmq5Consumer
from tidemq.client.admin.api import AdminClient
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer, ConsumeResult, PushConsumer
from tidemq.client.dashboard.cli import READY_PREFIX, command_line
from tidemq.client.errors import TideMQError
from tidemq.client.message import Message, ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.headers import ConsumerSendMsgBackRequestHeader
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.protocol.models import SubscriptionGroupConfig, TopicConfig
from tidemq.client.trace import TRACE_TOPIC

PATHS = chromium_paths()
if isinstance(PATHS, str):
    if os.environ.get("CI"):
        pytest.fail(f"the browser tests need Chromium under CI: {PATHS}", pytrace=False)
    pytest.skip(PATHS, allow_module_level=True)

SHOTS = REPO_ROOT / "screenshots" / "dashboard"
WAIT = 30.0
T = TypeVar("T")


@dataclass
class Console:
    namesrv: str
    master: Daemon
    slave: Daemon
    url: str
    read_only_url: str
    open_url: str

    def admin(self, work: Callable[[AdminClient], Awaitable[T]]) -> T:
        async def go() -> T:
            async with AdminClient(self.namesrv) as admin:
                return await work(admin)

        return asyncio.run(go())


def _dashboard(group: ProcessGroup, namesrv: str, name: str, *extra: str) -> str:
    port = free_port()
    args = command_line(namesrv, port, LOOPBACK, "--interval", "0.5", *extra)
    group.start(args, port=port, name=name, ready_text=READY_PREFIX)
    return f"http://{LOOPBACK}:{port}"


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("dashboard")
    group = ProcessGroup(root / "logs")
    try:
        namesrv = group.namesrvd(name="namesrvd")
        master, _ = start_master(group, namesrv, root / "master", role="ASYNC_MASTER")
        slave = start_slave(group, namesrv, root / "slave")
        url = _dashboard(group, namesrv.address, "dashboard", "--ak", "admin", "--sk", "secret12")
        read_only = _dashboard(group, namesrv.address, "dashboard-ro", "--read-only")
        open_url = _dashboard(group, namesrv.address, "dashboard-open")
        yield Console(namesrv.address, master, slave, url, read_only, open_url)
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def chrome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    assert not isinstance(PATHS, str)
    SHOTS.mkdir(parents=True, exist_ok=True)
    log = tmp_path_factory.mktemp("chromedriver") / "chromedriver.log"
    driver = headless_chrome(*PATHS, log)
    try:
        yield driver
    finally:
        driver.quit()


_loads = count()


def open_page(chrome: webdriver.Chrome, base: str, route: str, page: str) -> None:
    """Load the dashboard afresh at `route` and wait until `page` has drawn its data."""
    chrome.get(f"{base}/?load={next(_loads)}#/{route}")
    wait_loaded(chrome, page)


def wait_loaded(chrome: webdriver.Chrome, page: str) -> None:
    def drawn(driver: webdriver.Chrome) -> bool:
        state = driver.execute_script("return document.body.dataset.loaded || ''")
        if state == "error":
            raise AssertionError(f"page {page} failed: {notice(driver)}")
        return bool(state == page)

    until(chrome, drawn)


def until(chrome: webdriver.Chrome, condition: Callable[[webdriver.Chrome], object]) -> None:
    """Wait for `condition`; an element replaced while it was read (the pages redraw whole
    tables) is read again."""
    WebDriverWait(chrome, WAIT, ignored_exceptions=(StaleElementReferenceException,)).until(
        condition
    )


def notice(chrome: webdriver.Chrome) -> str:
    box = chrome.find_element(By.ID, "notice")
    return str(box.text) if box.is_displayed() else ""


def wait_notice(chrome: webdriver.Chrome, contains: str) -> str:
    until(chrome, lambda d: contains in notice(d))
    return notice(chrome)


def shot(chrome: webdriver.Chrome, name: str) -> None:
    """Save the page as screenshots/dashboard/NAME.png, checking its scripts raised nothing."""
    chrome.save_screenshot(str(SHOTS / f"{name}.png"))
    errors = [e["message"] for e in chrome.get_log("browser") if e["source"] == "javascript"]
    assert not errors, errors


def rows(chrome: webdriver.Chrome, table_id: str) -> list[list[str]]:
    body = chrome.find_element(By.CSS_SELECTOR, f"#{table_id} tbody")
    return [
        [str(cell.text) for cell in row.find_elements(By.TAG_NAME, "td")]
        for row in body.find_elements(By.TAG_NAME, "tr")
    ]


def fill(form: WebElement, name: str, value: str) -> None:
    field = form.find_element(By.NAME, name)
    field.clear()
    field.send_keys(value)


def set_time(chrome: webdriver.Chrome, form_id: str, name: str, ms: int) -> None:
    """A datetime-local input set to `ms` (local time, whole seconds)."""
    chrome.execute_script(
        "const input = document.querySelector(`#${arguments[0]} [name=${arguments[1]}]`);"
        "input.value = localInput(arguments[2]);",
        form_id,
        name,
        ms,
    )


async def _make_topic(admin: AdminClient, address: str, topic: str, queues: int) -> None:
    await admin.create_topic(address, TopicConfig(topic, queues, queues))
    for _ in range(300):
        try:
            await admin.topic_route(topic)
        except TideMQError:
            await asyncio.sleep(0.05)
        else:
            return
    raise AssertionError(f"no route for {topic}")


def make_topic(console: Console, topic: str, queues: int = 4) -> None:
    console.admin(lambda a: _make_topic(a, console.master.address, topic, queues))


def send(console: Console, topic: str, n: int, key: str = "") -> list[str]:
    async def work(admin: AdminClient) -> list[str]:
        ids = []
        for i in range(n):
            msg = Message(topic, f"{topic} message {i}".encode(), tags="T", keys=key or None)
            _, _, result = await admin.send_message(msg)
            ids.append(result.msg_id)
        return ids

    return console.admin(work)


def lag(console: Console, group: str, topic: str) -> int:
    async def work(admin: AdminClient) -> int:
        return (await admin.examine_consume_stats(group, topic)).total_diff()

    return console.admin(work)


# --- the pages ------------------------------------------------------------------------------


def test_cluster_page_shows_master_slave_and_ha_lag(
    console: Console, chrome: webdriver.Chrome
) -> None:
    make_topic(console, "ClusterTopic")
    send(console, "ClusterTopic", 5)
    open_page(chrome, console.url, "cluster", "cluster")
    table = rows(chrome, "brokers")
    by_id = {row[2]: row for row in table}
    assert set(by_id) == {"0", "1"}
    master, slave = by_id["0"], by_id["1"]
    assert master[3] == console.master.address and master[4] == "ASYNC_MASTER"
    assert slave[3] == console.slave.address and slave[4] == "SLAVE"
    assert master[5] == "serving" and slave[5] == "serving"  # each broker's /health
    assert master[6].startswith("V4_9_4 (tidemq ")
    assert int(master[9].replace(",", "")) >= 5  # put today
    assert master[13] == "" and slave[13].replace(",", "").isdigit()  # HA lag: slaves only
    assert master[11].endswith("%")
    assert master[14].replace(",", "").isdigit()  # dispatch behind

    def replicated() -> bool:  # the slave named as broker-a/1 once the master asked it
        open_page(chrome, console.url, "cluster", "cluster")
        slave_name = f"broker-a/1 {console.slave.address}"
        return any(
            (r[0], r[2], r[6]) == ("broker-a", slave_name, "in sync") for r in rows(chrome, "ha")
        )

    eventually_sync(replicated, "the master's HA connection on the page", WAIT)
    shot(chrome, "cluster")


def test_a_topic_created_updated_and_deleted_in_the_pages(
    console: Console, chrome: webdriver.Chrome
) -> None:
    open_page(chrome, console.url, "topics", "topics")
    form = chrome.find_element(By.ID, "topic-form")
    fill(form, "topic", "PageTopic")
    fill(form, "readQueueNums", "3")
    fill(form, "writeQueueNums", "3")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert "topic PageTopic saved on" in wait_notice(chrome, "saved")

    async def queues(admin: AdminClient) -> list[int]:
        try:
            route = await admin.topic_route("PageTopic")
        except TideMQError:
            return []
        return [q.write_queue_nums for q in route.queue_datas]

    eventually_sync(lambda: console.admin(queues) == [3], "PageTopic routed with 3 queues", WAIT)

    def listed() -> bool:
        open_page(chrome, console.url, "topics", "topics")
        return ["PageTopic", "normal"] in rows(chrome, "topics")

    eventually_sync(listed, "PageTopic in the topic list", WAIT)
    shot(chrome, "topics")

    open_page(chrome, console.url, "topics/PageTopic", "topic")
    assert [r[0] for r in rows(chrome, "route-brokers")] == ["broker-a"]
    assert rows(chrome, "route-queues") == [["broker-a", "3", "3", "RW-"]]
    form = chrome.find_element(By.ID, "send-form")
    fill(form, "keys", "page-key")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert "sent: SEND_OK" in wait_notice(chrome, "sent:")
    wait_loaded(chrome, "topic")
    queue_rows = rows(chrome, "queues")
    assert [r[1] for r in queue_rows] == ["0", "1", "2"]
    assert sum(int(r[3]) for r in queue_rows) == 1  # max offsets
    assert all(r[2] == "0" for r in queue_rows)  # min offsets

    update = chrome.find_element(By.ID, "update-form")
    assert update.find_element(By.NAME, "readQueueNums").get_attribute("value") == "3"
    fill(update, "readQueueNums", "4")
    fill(update, "writeQueueNums", "4")
    update.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_notice(chrome, "topic PageTopic saved")
    eventually_sync(lambda: console.admin(queues) == [4], "PageTopic routed with 4 queues", WAIT)
    open_page(chrome, console.url, "topics/PageTopic", "topic")
    assert rows(chrome, "route-queues") == [["broker-a", "4", "4", "RW-"]]
    assert len(rows(chrome, "queues")) == 4
    shot(chrome, "topic")

    chrome.find_element(By.ID, "delete-topic").click()
    chrome.find_element(By.ID, "confirm-delete").click()
    wait_loaded(chrome, "topics")  # back on the list
    assert "topic PageTopic deleted" in notice(chrome)
    assert "PageTopic" not in [r[0] for r in rows(chrome, "topics")]

    async def listed(admin: AdminClient) -> bool:
        return "PageTopic" in await admin.topic_list()

    assert not console.admin(listed)


def test_group_lag_and_offset_reset(console: Console, chrome: webdriver.Chrome) -> None:
    topic, group, sends = "LagTopic", "dash_lag_group", 7
    make_topic(console, topic)
    master = console.master.address

    async def prepare(admin: AdminClient) -> None:
        await admin.update_subscription_group(master, SubscriptionGroupConfig(group))
        for qid in range(4):  # the group has read nothing yet: every message is lag
            await admin.api.update_consumer_offset(master, group, topic, qid, 0)

    console.admin(prepare)
    before = int(time.time() * 1000) - 2000
    send(console, topic, sends)
    assert lag(console, group, topic) == sends

    # An online group beside it: its member shows.
    received: list[ReceivedMessage] = []

    def listener(msg: ReceivedMessage) -> ConsumeResult:
        received.append(msg)
        return ConsumeResult.SUCCESS

    make_topic(console, "OnlineTopic", 2)
    consumer = PushConsumer(
        "dash_online",
        config=ClientConfig.create(console.namesrv, heartbeat_broker_interval=1.0),
    )
    consumer.subscribe("OnlineTopic", "*", listener)
    consumer.start()
    try:
        open_page(chrome, console.url, "groups", "groups")
        groups = {r[0]: r for r in rows(chrome, "groups")}
        assert groups[group][1:] == ["0", "offline", "", str(sends)]

        def member_shown() -> bool:
            open_page(chrome, console.url, "groups", "groups")
            row = {r[0]: r for r in rows(chrome, "groups")}.get("dash_online")
            return row is not None and row[1:4] == ["1", "PUSH", "CLUSTERING"]

        eventually_sync(member_shown, "dash_online online with 1 member", WAIT)
        shot(chrome, "groups")
        open_page(chrome, console.url, "groups/dash_online", "group")
        assert len(rows(chrome, "members")) == 1
        # A push consumer also subscribes to its group's retry topic.
        assert rows(chrome, "subscriptions") == [["%RETRY%dash_online", "*"], ["OnlineTopic", "*"]]
    finally:
        consumer.shutdown()

    open_page(chrome, console.url, f"groups/{group}", "group")
    assert chrome.find_element(By.ID, "lag-total").text == str(sends)
    lag_rows = rows(chrome, "lag")
    assert sum(int(r[5]) for r in lag_rows) == sends
    assert all(r[0] == topic and r[4] == "0" for r in lag_rows)
    shot(chrome, "group")

    skip = chrome.find_element(By.ID, "skip-form")
    Select(skip.find_element(By.NAME, "topic")).select_by_value(topic)
    skip.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_notice(chrome, "skipped")
    assert lag(console, group, topic) == 0
    wait_loaded(chrome, "group")
    assert chrome.find_element(By.ID, "lag-total").text == "0"

    reset = chrome.find_element(By.ID, "reset-form")
    Select(reset.find_element(By.NAME, "topic")).select_by_value(topic)
    set_time(chrome, "reset-form", "time", before)
    reset.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_notice(chrome, "reset:")
    assert lag(console, group, topic) == sends
    wait_loaded(chrome, "group")
    assert chrome.find_element(By.ID, "lag-total").text == str(sends)


def test_messages_by_time_key_and_id_and_dead_letter_resend(
    console: Console, chrome: webdriver.Chrome
) -> None:
    topic, group = "BrowseTopic", "dash_dlq_group"
    make_topic(console, topic)
    ids = send(console, topic, 12)
    (dead_id,) = send(console, topic, 1, key="dead-key")

    open_page(chrome, console.url, f"messages?topic={topic}", "messages")
    until(chrome, lambda d: d.find_elements(By.ID, "result-count"))
    assert chrome.find_element(By.ID, "result-count").text.startswith("13 message(s)")
    form = chrome.find_element(By.ID, "time-form")
    fill(form, "pageSize", "5")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(chrome, lambda d: "page 1 of 3" in d.find_element(By.ID, "result-count").text)
    first_page = rows(chrome, "messages")
    assert len(first_page) == 5 and first_page[0][3] == "dead-key"  # newest first
    chrome.find_element(By.ID, "next-page").click()
    until(chrome, lambda d: "page 2 of 3" in d.find_element(By.ID, "result-count").text)
    assert not {r[0] for r in rows(chrome, "messages")} & {r[0] for r in first_page}

    key_form = chrome.find_element(By.ID, "key-form")
    fill(key_form, "topic", topic)
    fill(key_form, "key", "dead-key")
    key_form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(chrome, lambda d: "with key dead-key" in d.find_element(By.ID, "result-count").text)
    assert len(rows(chrome, "messages")) == 1
    chrome.find_element(By.CSS_SELECTOR, "#messages a").click()
    until(chrome, lambda d: d.find_elements(By.ID, "message-body"))
    assert chrome.find_element(By.ID, "message-body").text == f"{topic} message 0"
    shot(chrome, "messages")

    # Into the dead-letter queue, then resent from its page.
    async def to_dead_letters(admin: AdminClient) -> str:
        dead = await admin.view_message(dead_id)
        header = ConsumerSendMsgBackRequestHeader(
            offset=dead.physical_offset, group=group, delay_level=-1, origin_topic=topic
        )
        await admin.api.consumer_send_msg_back(console.master.address, header)
        for _ in range(300):
            try:
                found = await admin.query_message(f"%DLQ%{group}", "dead-key")
            except TideMQError:
                found = []
            if found:
                return found[0][1].msg_id
            await asyncio.sleep(0.05)
        raise AssertionError("no dead letter")

    letter_id = console.admin(to_dead_letters)
    id_form = chrome.find_element(By.ID, "id-form")
    fill(id_form, "id", letter_id)
    id_form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(chrome, lambda d: d.find_elements(By.ID, "resend"))
    resend = chrome.find_element(By.ID, "resend")
    assert resend.text == f"Resend to {topic}"
    shot(chrome, "message-dead-letter")
    resend.click()
    assert f"resent to {topic}" in wait_notice(chrome, "resent")

    async def keyed(admin: AdminClient) -> int:
        return len(await admin.query_message(topic, "dead-key"))

    eventually_sync(lambda: console.admin(keyed) == 2, "the resent copy in the topic", WAIT)
    assert len(ids) == 12


def test_a_message_s_trace_in_its_detail(console: Console, chrome: webdriver.Chrome) -> None:
    """A message sent and consumed with trace on: its detail lists the Pub, SubBefore and
    SubAfter records the trace topic holds."""
    topic = "TracedTopic"
    make_topic(console, topic, 1)
    make_topic(console, TRACE_TOPIC, 1)
    config = ClientConfig.create(console.namesrv, heartbeat_broker_interval=1.0)

    async def traced(admin: AdminClient) -> str:
        async with AsyncProducer("P-dash-trace", config=config, enable_trace=True) as producer:
            sent = await producer.send(Message(topic, b"traced", keys="traced-1"))
        got = asyncio.Event()

        async def listener(msg: ReceivedMessage) -> ConsumeResult:
            got.set()
            return ConsumeResult.SUCCESS

        consumer = AsyncPushConsumer(
            "dash_trace_group",
            config=config,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            enable_trace=True,
        )
        consumer.subscribe(topic, "*", listener)
        await consumer.start()
        try:
            await asyncio.wait_for(got.wait(), WAIT)
        finally:
            await consumer.shutdown()  # sends its queued trace records
        for _ in range(600):  # the trace topic's index is built by another process
            records, _skipped = await admin.message_trace(sent.msg_id)
            if len(records) == 3:
                return sent.msg_id
            await asyncio.sleep(0.05)
        raise AssertionError(f"trace of {sent.msg_id}: {records}")

    msg_id = console.admin(traced)
    open_page(chrome, console.url, f"messages?topic={topic}", "messages")
    id_form = chrome.find_element(By.ID, "id-form")
    fill(id_form, "id", msg_id)
    fill(id_form, "topic", topic)
    id_form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(chrome, lambda d: d.find_elements(By.ID, "trace-table"))
    shown = rows(chrome, "trace-table")
    assert [(r[0], r[1], r[4]) for r in shown] == [
        ("Pub", "P-dash-trace", "success"),
        ("SubBefore", "dash_trace_group", "-"),
        ("SubAfter", "dash_trace_group", "success"),
    ]
    assert f"topic={topic}" in shown[0][5] and "keys=traced-1" in shown[0][5]
    # The detail column wraps inside the panel: nothing sticks out to the right.
    overflow = chrome.execute_script(
        "const panel = document.querySelector('#message-detail .panel');"
        "const table = document.getElementById('trace-table');"
        "return [table.getBoundingClientRect().right, panel.getBoundingClientRect().right,"
        " panel.scrollWidth, panel.clientWidth];"
    )
    assert overflow[0] <= overflow[1] and overflow[2] <= overflow[3], overflow
    shot(chrome, "message-trace")


def test_live_chart_of_a_topic_updates(console: Console, chrome: webdriver.Chrome) -> None:
    topic = "ChartTopic"
    make_topic(console, topic)
    open_page(chrome, console.url, "charts", "charts")

    def chart(name: str) -> tuple[int, dict[str, Any]]:
        """(points drawn, latest value per series) of a chart, read in one go: the page
        redraws its charts every sample."""
        points, latest = chrome.execute_script(
            "const svg = document.querySelector(`#chart-${arguments[0]} svg`);"
            "return svg ? [Number(svg.dataset.points), svg.dataset.latest] : [0, '{}'];",
            name,
        )
        return int(points), json.loads(latest)

    eventually_sync(lambda: topic in chart("topicIn")[1], f"{topic} charted", WAIT)
    points, _ = chart("topicIn")
    eventually_sync(lambda: chart("topicIn")[0] > points, "a new sample drawn", WAIT)

    def shows_sends() -> bool:
        send(console, topic, 10)
        value = chart("topicIn")[1].get(topic)
        return value is not None and value > 0

    eventually_sync(shows_sends, f"{topic}'s sends on the chart", WAIT, interval=0.3)
    broker_in = chart("brokerIn")[1]
    assert set(broker_in) == {"broker-a/0", "broker-a/1"}
    shot(chrome, "charts")


def test_read_only_dashboard_shows_no_write_control(
    console: Console, chrome: webdriver.Chrome
) -> None:
    make_topic(console, "ReadOnlyTopic")
    open_page(chrome, console.read_only_url, "topics", "topics")
    mode = chrome.find_element(By.ID, "mode")
    assert "read-only" in mode.text
    assert mode.get_attribute("title") == "started with --read-only"
    assert not chrome.find_elements(By.ID, "topic-form")
    assert rows(chrome, "topics")  # what it reads is there
    open_page(chrome, console.read_only_url, "topics/ReadOnlyTopic", "topic")
    for control in ("update-form", "send-form", "delete-topic", "confirm-delete"):
        assert not chrome.find_elements(By.ID, control), control
    assert rows(chrome, "queues")
    open_page(chrome, console.read_only_url, "brokers", "brokers")
    assert not chrome.find_elements(By.CSS_SELECTOR, "form[data-broker]")
    shot(chrome, "read-only-topic")

    async def topics(admin: AdminClient) -> list[str]:
        return await admin.topic_list()

    assert "RefusedTopic" not in console.admin(topics)


def test_without_an_account_on_loopback_and_no_acl_it_is_writable(
    console: Console, chrome: webdriver.Chrome
) -> None:
    open_page(chrome, console.open_url, "topics", "topics")
    mode = chrome.find_element(By.ID, "mode")
    assert "writable" in mode.text
    assert mode.get_attribute("title") == "no broker checks ACL and it listens on loopback only"
    form = chrome.find_element(By.ID, "topic-form")
    fill(form, "topic", "OpenTopic")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert wait_notice(chrome, "saved").startswith("topic OpenTopic saved on ")

    async def topics(admin: AdminClient) -> list[str]:
        return await admin.topic_list()

    assert "OpenTopic" in console.admin(topics)


def test_producer_page_lists_a_group_s_connected_producers(
    console: Console, chrome: webdriver.Chrome
) -> None:
    topic, group = "ProducedTopic", "P-dash-page"
    make_topic(console, topic, 1)
    config = ClientConfig.create(console.namesrv, heartbeat_broker_interval=0.5)

    async def connected(admin: AdminClient) -> None:
        async with AsyncProducer(group, config=config) as producer:
            await producer.send(Message(topic, b"from a producer"))
            for _ in range(600):  # registered with the broker by its next heartbeat
                try:
                    found = await admin.examine_producer_connection(group, topic)
                except TideMQError:
                    await asyncio.sleep(0.05)
                    continue
                if found.connections:
                    break
            open_page(chrome, console.url, f"producers?topic={topic}&group={group}", "producers")
            shown = rows(chrome, "producers")
            assert len(shown) == 1 and shown[0][2] == "PYTHON", shown
            assert shown[0][0] == found.connections[0].client_id
            assert chrome.find_element(By.ID, "producer-count").text.startswith(
                f"1 producer(s) of {group} connected to the masters of {topic}"
            )
            shot(chrome, "producers")

    console.admin(connected)
    open_page(chrome, console.url, f"producers?topic={topic}&group=NoSuchGroup", "producers")
    assert rows(chrome, "producers") == [["none"]]


def test_rocketmq5_page_shows_grpc_clients_pop_progress_and_pending_timers(
    console: Console, chrome: webdriver.Chrome
) -> None:
    """The official Python 5.x SimpleConsumer connected to the master's gRPC port holds three
    messages and has acknowledged one; a timer message waits 10 minutes."""
    topic, group, timed = "Rmq5PageTopic", "G-dash-rmq5", "Rmq5TimerTopic"
    make_topic(console, topic, 1)
    make_topic(console, timed, 1)
    grpc_port = next(a for a in reversed(console.master.args) if a.startswith("grpcServerPort="))
    endpoint = f"127.0.0.1:{grpc_port.partition('=')[2]}"
    send(console, topic, 4)

    async def timer(admin: AdminClient) -> None:
        await admin.send_message(Message(timed, b"later", delay_ms=600_000))

    console.admin(timer)

    async def connected() -> None:
        consumer = await Rmq5Consumer.start(
            endpoint, mode="simple", topic=topic, group=group, await_seconds=1
        )
        try:
            got = await consumer.receive_until(4, invisible=300)
            await consumer.call(op="ack", id=got[0]["id"])

            def drawn(driver: webdriver.Chrome) -> bool:
                open_page(driver, console.url, "rocketmq5", "rocketmq5")
                pop = [r for r in rows(driver, "pop-progress") if r[0] == group]
                timers = [r for r in rows(driver, "timer-topics") if r[0] == timed]
                return bool(pop and pop[0][8] == "1" and timers)

            until(chrome, drawn)
            clients = [r for r in rows(chrome, "grpc-clients") if r[2] == group]
            assert len(clients) == 1, clients
            assert clients[0][1:6] == ["SIMPLE_CONSUMER", group, topic, "PYTHON", "5.1.2"]
            [pop] = [r for r in rows(chrome, "pop-progress") if r[0] == group]
            # group, topic, broker, queue, broker offset, pop offset, in flight, invisible, acked
            assert pop[1] == topic and pop[3:] == ["0", "4", "4", "3", "3", "1"], pop
            [timers] = [r for r in rows(chrome, "timer-topics") if r[0] == timed]
            assert timers[2] == "1"
            shot(chrome, "rocketmq5")
        finally:
            await consumer.close()

    asyncio.run(connected())


def test_broker_configuration_page_shows_and_changes_a_key(
    console: Console, chrome: webdriver.Chrome
) -> None:
    open_page(chrome, console.url, "brokers", "brokers")
    config = {row[0]: row[1] for row in rows(chrome, "config-broker-a-0")}
    assert config["brokerRole"] == "ASYNC_MASTER" and config["brokerName"] == "broker-a"
    assert config["listenPort"] == console.master.address.rsplit(":", 1)[1]
    assert {row[0]: row[1] for row in rows(chrome, "config-broker-a-1")}["brokerRole"] == "SLAVE"
    form = chrome.find_element(By.CSS_SELECTOR, f"form[data-broker='{console.master.address}']")
    Select(form.find_element(By.NAME, "key")).select_by_value("flushConsumerOffsetInterval")
    fill(form, "value", "4321")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert wait_notice(chrome, "is now").startswith(
        f"flushConsumerOffsetInterval of {console.master.address} is now 4321"
    )
    wait_loaded(chrome, "brokers")
    config = {row[0]: row[1] for row in rows(chrome, "config-broker-a-0")}
    assert config["flushConsumerOffsetInterval"] == "4321"
    shot(chrome, "broker-config")
    form = chrome.find_element(By.CSS_SELECTOR, f"form[data-broker='{console.master.address}']")
    Select(form.find_element(By.NAME, "key")).select_by_value("brokerRole")
    fill(form, "value", "SLAVE")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    assert "cannot change brokerRole while the broker runs" in wait_notice(chrome, "cannot change")


def test_acl_page_shows_which_brokers_check_acl(console: Console, chrome: webdriver.Chrome) -> None:
    open_page(chrome, console.url, "acl", "acl")
    shown = rows(chrome, "acl")
    assert sorted((r[0], r[1], r[2]) for r in shown) == [
        ("broker-a/0", console.master.address, "off"),
        ("broker-a/1", console.slave.address, "off"),
    ]
    shot(chrome, "acl")


ISO_TIME = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$"


def test_charts_drop_a_deleted_topic_and_a_stopped_broker_and_use_iso_times(
    console: Console, chrome: webdriver.Chrome
) -> None:
    """Last in the module: it stops the slave."""
    topic = "ChartGoneTopic"
    make_topic(console, topic)
    open_page(chrome, console.url, "charts", "charts")

    def legend(name: str) -> set[str]:
        latest = chrome.execute_script(
            "const svg = document.querySelector(`#chart-${arguments[0]} svg`);"
            "return svg ? svg.dataset.latest : '{}';",
            name,
        )
        return set(json.loads(latest))

    eventually_sync(lambda: topic in legend("topicIn"), f"{topic} charted", WAIT)
    labels = chrome.execute_script(
        "return [...document.querySelectorAll('#chart-topicIn svg text')].map(t => t.textContent)"
    )
    stamps = [label for label in labels if ":" in label]
    assert len(stamps) == 2 and all(re.match(ISO_TIME, s) for s in stamps), labels

    async def delete(admin: AdminClient) -> None:
        await admin.delete_topic_in_broker(console.master.address, topic)
        await admin.delete_topic_in_namesrv(topic)

    console.admin(delete)
    eventually_sync(lambda: topic not in legend("topicIn"), f"{topic} gone from the legend", WAIT)
    assert legend("brokerIn") == {"broker-a/0", "broker-a/1"}
    console.slave.stop()
    eventually_sync(lambda: legend("brokerIn") == {"broker-a/0"}, "the stopped slave gone", WAIT)
    legend_text = chrome.find_element(By.CSS_SELECTOR, "#chart-brokerIn .legend").text
    assert "broker-a/1" not in legend_text
    shot(chrome, "charts-after-stop")
