"""Writes the seed corpora (tests/fuzz/corpus/<target>/) from the real encoders.

Run `python -m tests.fuzz.seeds` after a format changes; the files are checked in. Each seed is
a well-formed input of its target (a frame, a header, a record, ...), small, so that the fuzzer
starts from the inputs that reach deep into each decoder.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path

import msgpack  # type: ignore[import-untyped]

from tests.fuzz.targets import _HEADER_CLASSES
from tidemq.client.protocol import namesrv
from tidemq.client.protocol.heartbeat import HeartbeatData, ProducerData
from tidemq.client.protocol.models import DataVersion, TopicConfig
from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import encode_command
from tidemq.client.remoting.headers import (
    encode_json_header,
    encode_msgpack_header,
    encode_rocketmq_header,
)
from tidemq.ha.codec import encode_ack, encode_heartbeat, encode_transfer
from tidemq.store.batch_body import encode_batch_body
from tidemq.store.record import MessageToStore, encode_record, pack_host

CORPUS = Path(__file__).resolve().parent / "corpus"


def _commands() -> list[RemotingCommand]:
    send = RemotingCommand.request(
        310,
        {
            "a": "PG",
            "b": "TopicTest",
            "c": "TBW102",
            "d": "4",
            "e": "1",
            "f": "0",
            "g": "1700000000000",
            "h": "0",
            "i": "TAGS\x01A\x02KEYS\x01k1 k2\x02",
            "j": "0",
            "k": "false",
            "m": "false",
        },
        b"hello",
    )
    route = RemotingCommand.request(105, {"topic": "TopicTest"})
    odd = RemotingCommand.request(34, {"queueId": "0", "x": "\u00e9"}, b"")
    odd.remark = "r\u00e9mark"
    return [send, route, odd]


def _records() -> list[bytes]:
    v4, v6 = pack_host("10.0.0.17", 52344), pack_host("fe80::1", 10911)
    out = []
    for body, props, born, store in (
        (b"hello", "TAGS\x01A\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01AB12\x02", v4, v4),
        (b"", "", v6, v4),
        (b"x" * 40, "WAIT\x01true\x02", v4, v6),
    ):
        msg = MessageToStore("TopicTest", 1, body, props, born_host=born, store_host=store)
        out.append(bytes(encode_record(msg, 4096).data))
    return out


def _compressed_record() -> bytes:
    msg = MessageToStore("TopicTest", 2, zlib.compress(b"z" * 300), "TAGS\x01Z\x02", sys_flag=1)
    return bytes(encode_record(msg, 4096).data)


def seeds() -> dict[str, list[bytes]]:
    commands = _commands()
    for_type = {kind: [] for kind in SerializeType}
    for cmd in commands:
        for kind in SerializeType:
            cmd.serialize_type = kind
            for_type[kind].append(encode_command(cmd))
    records = _records()
    batch = encode_batch_body(
        [(0, b"one", "TAGS\x01A\x02"), (3, b"", ""), (0, b"x" * 20, "KEYS\x01k\x02")]
    )
    topics = [TopicConfig("TopicTest", 8, 8, 6), TopicConfig("%RETRY%G", 1, 1, 6)]
    version = DataVersion(timestamp=1_700_000_000_000, counter=3)  # fixed: the seeds are too
    register = namesrv.RegisterBrokerBody(namesrv.topic_config_wrapper(topics, version), ["f:1"])
    heartbeat = HeartbeatData("c1", [ProducerData("PG")], [])
    header_seeds = []
    for index, (_cls, keys) in enumerate(_HEADER_CLASSES):
        fields = b"".join(bytes([k]) + b"\x00" + b"1\x00" for k in range(min(len(keys), 6)))
        header_seeds.append(bytes([index]) + fields)
    return {
        "frame": [
            b"".join(for_type[SerializeType.JSON]),
            *for_type[SerializeType.MSGPACK],
            *for_type[SerializeType.ROCKETMQ],
        ],
        "header_json": [encode_json_header(c) for c in commands]
        + [
            b'{"code":105,"language":"CPP","opaque":"7","extFields":{"queueId":0,"v":1.50,"n":[1,{"a":null}]}}\n'
        ],
        "header_msgpack": [encode_msgpack_header(c) for c in commands]
        + [
            msgpack.packb(
                {
                    "code": 1,
                    "opaque": 2,
                    "language": "JAVA",
                    "extFields": {"x": [1, "y"], "b": True},
                }
            )
        ],
        "header_rocketmq": [encode_rocketmq_header(c) for c in commands],
        "request_headers": header_seeds[:: max(1, len(header_seeds) // 12)],
        "json_bodies": [
            b"\x00" + b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"}}],"queueDatas":[]}',
            b"\x01" + heartbeat.encode(),
            b"\x0a" + namesrv.TopicList(["a", "b"]).encode(),
            b"\x0b" + namesrv.KVTable({"k": "v"}).encode(),
            b"\x0c" + json.dumps({"timestamp": 1, "counter": 2}).encode(),
        ],
        "ha_transfer": [
            encode_heartbeat(0) + b"".join(encode_transfer(0, records[0])),
            b"".join(encode_transfer(0, records[0] + records[1]))
            + encode_heartbeat(len(records[0] + records[1])),
        ],
        "ha_ack": [encode_ack(0) + encode_ack(100) + encode_ack(4096), encode_ack(7)[:5]],
        "commitlog_record": [
            *records,
            records[0] + records[2] + struct.pack(">ii", 64, -875286124),
        ],
        "batch_body": [batch, encode_batch_body([(0, b"a", "")])],
        "properties_file": [
            b"brokerName=broker-a\nbrokerId = 0\n# comment\n! also\n"
            b"key\\\n  continued: v\\u00e9\\t\n",
            b"listenPort 10911\n\n   \nflushDiskType=SYNC_FLUSH   \n",
        ],
        "namesrv_register": [register.encode(), register.encode(compressed=True)],
        "acl_file": [
            b"globalWhiteRemoteAddresses:\n  - 10.10.103.*\n  - 192.168.0.{1,2}\naccounts:\n"
            b"  - accessKey: RocketMQ\n    secretKey: 12345678\n"
            b"    whiteRemoteAddress: 192.168.0.*\n    admin: false\n"
            b"    defaultTopicPerm: DENY\n    defaultGroupPerm: SUB\n"
            b"    topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]\n"
            b"    groupPerms: [groupA=DENY, groupB=PUB|SUB]\n",
            b"accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    admin: true\n",
        ],
        "pull_body": [b"".join(records), _compressed_record()],
        "spark_columns": [b"".join(records), records[0], _compressed_record()],
    }


def main() -> None:
    for target, inputs in seeds().items():
        folder = CORPUS / target
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for data in inputs:
            (folder / hashlib.sha1(data).hexdigest()[:16]).write_bytes(data)
        print(f"{target}: {len(inputs)} seeds")


if __name__ == "__main__":
    main()
