"""Operators' views of the RocketMQ 5 side, in process: the revive ledger's per-queue progress,
the timer metrics table and its file, the 5.x client rows (language from the settings' user
agent before the headers), and the bodies' codecs refusing what they cannot read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemq.broker.pop.ledger import Ack, Checkpoint, ReviveLedger
from tidemq.broker.processors.operators5 import client_info
from tidemq.broker.proxy.clients import GrpcClients
from tidemq.broker.proxy.protocol.definition_pb2 import (
    UA,
    ClientType,
    Language,
    Publishing,
    Resource,
    Settings,
)
from tidemq.broker.timer_metrics import TimerMetrics
from tidemq.client.protocol.operators5 import (
    GrpcClientInfo,
    PopQueueProgress,
    decode_grpc_clients,
    decode_pop_progress,
    decode_timer_metrics,
)
from tidemq.client.remoting.errors import BodyDecodeError

POP = 1_000_000


def test_queue_progress_splits_in_flight_into_invisible_and_due_and_counts_acks() -> None:
    ledger = ReviveLedger()
    early = Checkpoint("T", "G", 0, 10, POP, 1_000, (10, 11))
    late = Checkpoint("T", "G", 0, 12, POP, 60_000, (12, 13, 14))
    other = Checkpoint("T", "H", 1, 0, POP, 60_000, (0,))
    for position, checkpoint in enumerate((early, late, other)):
        ledger.checkpoint(checkpoint, position, POP)
    ledger.ack(Ack("T", "G", 0, 12, POP, 13), 3, POP + 1)
    ledger.ack(Ack("T", "G", 0, 12, POP, 99), 4, POP + 1)  # no such offset: not counted
    now = POP + 5_000  # past early's deadline, not yet revived
    assert ledger.queue_progress(now) == {("T", "G", 0): (4, 2), ("T", "H", 1): (1, 1)}
    assert ledger.acked == {("T", "G", 0): 1}
    ledger.watermark = now
    assert [r.checkpoint for r in ledger.due(now)] == [early]  # revived: in flight no more
    assert ledger.queue_progress(now) == {("T", "G", 0): (2, 2), ("T", "H", 1): (1, 1)}


def test_timer_metrics_count_per_topic_never_below_zero_and_survive_a_save(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config" / "timermetrics"
    metrics = TimerMetrics(path)
    for topic in ("A", "A", "B"):
        metrics.add(topic, 1, now_ms=5)
    metrics.add("B", -1)
    metrics.add("B", -1)  # a skip whose enqueue was counted before a crash: stays 0
    metrics.add("", 1)  # no real topic: not counted
    assert (metrics.count("A"), metrics.count("B")) == (2, 0)
    metrics.save()
    stored = json.loads(path.read_text())
    assert stored["timingCount"] == {"A": {"count": 2, "timeStamp": 5}}  # RocketMQ's layout
    assert stored["dataVersion"]["counter"] == 5
    assert metrics.snapshot() is None  # unchanged since: nothing to write
    again = TimerMetrics(path)
    again.load()
    assert again.count("A") == 2 and [c.topic for c in decode_timer_metrics(again.body())] == ["A"]


def test_damaged_timer_metrics_start_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "timermetrics"
    path.write_text('{"timingCount": {"A": {"count": "many"}}}')
    metrics = TimerMetrics(path)
    metrics.load()
    assert metrics.count("A") == 0


def test_a_client_row_takes_language_and_version_from_its_settings() -> None:
    clients = GrpcClients(clock=lambda: 100.0)
    client = clients.touch("cid", "127.0.0.1:5000", "HTTP", "1.0.8")
    assert client_info(client, 1_000.0, 100.0).language == "HTTP"  # no settings yet: headers
    settings = Settings(
        client_type=ClientType.PRODUCER,
        user_agent=UA(language=Language.NODE_JS, version="1.0.8"),
        publishing=Publishing(topics=[Resource(name="T2"), Resource(name="T1")]),
    )
    client.settings, client.client_type = settings, ClientType.PRODUCER
    row = client_info(client, 1_000.0, 110.0)
    assert (row.language, row.version, row.client_type) == ("NODE_JS", "1.0.8", "PRODUCER")
    assert row.topics == ("T1", "T2")
    assert row.last_heartbeat_timestamp == 990_000  # 10 s before the wall clock's now
    decoded = decode_grpc_clients({"brokerName": "b", "clients": [row.to_dict()]})
    assert decoded == [GrpcClientInfo(**{**_fields(row), "broker_name": "b"})]


def _fields(row: GrpcClientInfo) -> dict[str, object]:
    return {name: getattr(row, name) for name in GrpcClientInfo.__slots__}


def test_pop_progress_round_trips() -> None:
    row = PopQueueProgress("G", "T", 1, 10, 8, 3, 2, 5)
    assert decode_pop_progress({"brokerName": "b", "queues": [row.to_dict()]})[0].acked == 5


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"clients": {}},
        {"clients": [{"clientId": 5}]},
        {"clients": [{"topics": "T"}]},
        {"clients": [{"lastHeartbeatTimestamp": True}]},
    ],
)
def test_a_client_list_that_cannot_be_read_is_refused(body: object) -> None:
    with pytest.raises(BodyDecodeError):
        decode_grpc_clients(body)


@pytest.mark.parametrize(
    "body", [{"queues": [{"queueId": "0"}]}, {"queues": 3}, {"timingCount": []}]
)
def test_progress_and_metrics_that_cannot_be_read_are_refused(body: object) -> None:
    with pytest.raises(BodyDecodeError):
        decode_pop_progress(body) if "queues" in body else decode_timer_metrics(body)  # type: ignore[operator]


def test_a_slave_takes_its_masters_table_as_it_is() -> None:
    metrics = TimerMetrics()
    metrics.add("OWN", 1)
    metrics.replace({"timingCount": {"A": {"count": 3, "timeStamp": 7}, "Z": {"count": 0}}})
    assert (metrics.count("A"), metrics.count("OWN"), metrics.count("Z")) == (3, 0, 0)
    with pytest.raises(ValueError):  # unreadable: the table stays
        metrics.replace({"timingCount": {"A": {"count": "3"}}})
    assert metrics.count("A") == 3
