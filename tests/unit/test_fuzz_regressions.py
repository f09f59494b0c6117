"""The crashes the fuzzer found (tests/fuzz), each as the documented error it must be now.

The inputs are also in tests/fuzz/regressions/, replayed through their fuzz targets.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from tidemq.client.consumer.received import decode_received
from tidemq.client.inflate import inflate_body
from tidemq.client.protocol.headers import CreateTopicRequestHeader, HeaderFieldError, decode
from tidemq.client.protocol.models import SubscriptionGroupConfig
from tidemq.client.protocol.namesrv import (
    NamesrvProtocolError,
    RegisterBrokerBody,
    parse_route_response,
)
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import HeaderDecodeError
from tidemq.client.remoting.frame import FrameDecoder
from tidemq.client.remoting.headers import decode_msgpack_header
from tidemq.store.record import MessageToStore, RecordFormatError, decode_record, encode_record

REGRESSIONS = Path(__file__).resolve().parents[1] / "fuzz" / "regressions"

# issue 20: a msgpack extFields value that is a map holding binary data
BINARY_IN_EXT_MAP = bytes.fromhex(
    "000000430200003f86a4636f6465cd0136a86c616e677561676500a776657273696f6ecd0191a66f7061"
    "71756501a4666c616700a96578744669656c647381a17881a161c40101"
)


def test_binary_inside_an_ext_field_map_is_a_header_decode_error() -> None:
    with pytest.raises(HeaderDecodeError, match=r"extFields\['x'\] holds a value JSON cannot"):
        FrameDecoder().feed(BINARY_IN_EXT_MAP)
    with pytest.raises(HeaderDecodeError, match="JSON cannot carry"):
        decode_msgpack_header(BINARY_IN_EXT_MAP[8:])


def record(body: bytes, sys_flag: int = 0) -> bytearray:
    msg = MessageToStore("TopicTest", 1, body, "TAGS\x01A\x02", sys_flag=sys_flag)
    return encode_record(msg, 1 << 20).data


def test_spark_columns_out_of_range_timestamp_is_a_record_format_error() -> None:
    pytest.importorskip("pyarrow")
    from tidemq.client.spark.records import ColumnBuffer, spark_schema
    from tidemq.store.tags import parse_tag_expression

    data = record(b"hello")
    struct.pack_into(">q", data, 56, 2**62)  # STORETIMESTAMP (IPv4 born host)
    columns = ColumnBuffer("TopicTest", "b", 1, spark_schema(False), parse_tag_expression("*"))
    columns.add(bytes(data), 0, 2**62)
    with pytest.raises(RecordFormatError, match="timestamp out of range"):
        columns.take()


def test_spark_columns_properties_length_past_the_body_is_a_record_format_error() -> None:
    pytest.importorskip("pyarrow")
    from tidemq.client.spark.records import ColumnBuffer, spark_schema
    from tidemq.store.tags import parse_tag_expression

    data = (REGRESSIONS / "spark_columns" / "properties-length-past-the-body").read_bytes()
    columns = ColumnBuffer("TopicTest", "b", 1, spark_schema(False), parse_tag_expression("*"))
    columns.add(data, 0, 2**62)
    with pytest.raises(RecordFormatError, match="properties length disagrees"):
        columns.take()


def test_compressed_body_that_is_not_zlib_or_a_bomb_is_a_record_format_error() -> None:
    with pytest.raises(RecordFormatError, match="not zlib"):
        decode_received(bytes(record(b"not zlib", sys_flag=1)), "b")
    with pytest.raises(RecordFormatError, match="inflates to more than 1000 bytes"):
        inflate_body(zlib.compress(bytes(5000)), 1000)
    assert inflate_body(zlib.compress(b"z" * 300)) == b"z" * 300


def test_record_shorter_than_its_hosts_is_a_record_format_error() -> None:
    data = (REGRESSIONS / "commitlog_record" / "record-shorter-than-its-hosts").read_bytes()
    with pytest.raises(RecordFormatError, match="too short for its hosts"):
        decode_record(data)


def test_a_register_body_with_an_infinite_timestamp_is_a_namesrv_protocol_error() -> None:
    data = (REGRESSIONS / "namesrv_register" / "data-version-timestamp-infinite").read_bytes()
    with pytest.raises(NamesrvProtocolError, match="a field has a bad value"):
        RegisterBrokerBody.decode(data)


@pytest.mark.parametrize(
    "body", [b'{"brokerDatas": 5}', b'{"queueDatas":[{"readQueueNums":"x"}]}'], ids=str
)
def test_a_route_with_values_of_the_wrong_type_is_a_namesrv_protocol_error(body: bytes) -> None:
    answer = RemotingCommand.response_to(RemotingCommand.request(105), ResponseCode.SUCCESS)
    answer.body = body
    with pytest.raises(NamesrvProtocolError, match="TopicRouteData: a field has a bad value"):
        parse_route_response(answer)


# issue 30, the request fuzzer (tests/fuzz/requests.py): a subscription group config whose
# numbers were lists or objects raised TypeError (a traceback, SYSTEM_ERROR); a topic or retry
# queue count of 2**31 made the broker loop over every queue on its event loop.
@pytest.mark.parametrize(
    "body",
    [{"retryQueueNums": []}, {"retryMaxTimes": {"a": 1}}, {"brokerId": 2**63},
     {"retryQueueNums": 2**31 - 1}, {"retryQueueNums": -1}],
    ids=str,
)  # fmt: skip
def test_a_group_config_with_a_bad_number_is_a_value_error(body: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"retryQueueNums|retryMaxTimes|brokerId"):
        SubscriptionGroupConfig.from_dict({"groupName": "g", **body})


@pytest.mark.parametrize("nums", ["2147483647", "-1", "9223372036854775807", "1025"])
def test_a_topic_with_too_many_or_negative_queues_is_a_header_field_error(nums: str) -> None:
    for key in ("readQueueNums", "writeQueueNums"):
        with pytest.raises(HeaderFieldError, match=key):
            decode(CreateTopicRequestHeader, {"topic": "t", key: nums})
    assert decode(CreateTopicRequestHeader, {"topic": "t", "writeQueueNums": "1024"})
