"""How the send processor reads the headers of SEND_MESSAGE (10), _V2 (310) and _BATCH (320)."""

from __future__ import annotations

import pytest

from tidemq.broker.processors.send import _decode_header
from tidemq.client.protocol.headers import SEND_V2_KEYS, SendMessageRequestHeader, encode
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.remoting.command import RemotingCommand


def header(*, batch: bool = False) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="PG",
        topic="T",
        queue_id=2,
        born_timestamp=1,
        properties="TAGS\x01A\x02",
        batch=batch,
    )


def decoded(code: int, ext: dict[str, str]) -> SendMessageRequestHeader:
    return _decode_header(RemotingCommand.request(code, ext))


def test_java_batch_uses_the_v2_keys() -> None:
    # Java's MQClientAPIImpl.sendMessage sends a MessageBatch as SEND_BATCH_MESSAGE with a
    # SendMessageRequestHeaderV2.
    ext = encode(header(batch=True), SEND_V2_KEYS)
    got = decoded(RequestCode.SEND_BATCH_MESSAGE, ext)
    assert (got.producer_group, got.topic, got.queue_id, got.batch) == ("PG", "T", 2, True)


def test_batch_with_long_keys_is_still_read() -> None:
    got = decoded(RequestCode.SEND_BATCH_MESSAGE, encode(header()))
    assert (got.producer_group, got.topic, got.queue_id) == ("PG", "T", 2)


@pytest.mark.parametrize(("raw", "batch"), [("1", True), ("0", False), ("true", True)])
def test_cpp_client_booleans(raw: str, batch: bool) -> None:
    # rocketmq-client-cpp sends batches as SEND_MESSAGE with batch=1 (and unitMode=0).
    ext = encode(header()) | {"batch": raw, "unitMode": "0"}
    assert decoded(RequestCode.SEND_MESSAGE, ext).batch is batch


def test_v2_batch_flag_one() -> None:
    ext = encode(header(), SEND_V2_KEYS) | {"m": "1"}
    assert decoded(RequestCode.SEND_MESSAGE_V2, ext).batch is True


def test_plain_send_is_not_a_batch() -> None:
    assert decoded(RequestCode.SEND_MESSAGE_V2, encode(header(), SEND_V2_KEYS)).batch is False
    assert decoded(RequestCode.SEND_MESSAGE, encode(header())).batch is False
