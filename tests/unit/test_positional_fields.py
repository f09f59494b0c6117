"""Field orders the hot paths rely on: these records are built positionally (a keyword call
of a class builds a dict per call), so a reordered or inserted field must fail here first."""

from __future__ import annotations

import dataclasses

from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.store.commitlog import AppendResult
from tidemq.store.record import MessageToStore


def names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_send_header_fields_keep_their_order() -> None:
    # client/producer.py, tests/bench/broker_bench.py,
    # client/protocol/_headers.pyx decode_send_header
    assert names(SendMessageRequestHeader) == [
        "producer_group",
        "topic",
        "default_topic",
        "default_topic_queue_nums",
        "queue_id",
        "sys_flag",
        "born_timestamp",
        "flag",
        "properties",
        "reconsume_times",
        "unit_mode",
        "batch",
        "max_reconsume_times",
    ]


def test_message_to_store_fields_keep_their_order() -> None:
    # broker/processors/send.py SendProcessor._message
    assert names(MessageToStore)[:10] == [
        "topic",
        "queue_id",
        "body",
        "properties",
        "flag",
        "sys_flag",
        "born_timestamp",
        "born_host",
        "store_host",
        "reconsume_times",
    ]


def test_append_result_fields_keep_their_order() -> None:
    # store/commitlog.py CommitLog.put
    assert names(AppendResult) == [
        "status",
        "wrote_offset",
        "wrote_bytes",
        "msg_id",
        "queue_offset",
        "store_timestamp",
        "msg_num",
        "remark",
        "msg_ids",
        "queue_offsets",
    ]
