"""The saved inputs of the request fuzzer's findings on c82965c, minimised by hand from its runs:
`python -m tests.fuzz.request_regressions` writes them to tests/fuzz/regressions/requests/,
where tests/fuzz/test_requests.py replays each against fresh daemons. Each file's `detail` says
what it did on c82965c; the invariants of tests/fuzz/requests.py say what it must do now.
"""

from __future__ import annotations

import json

from tests.fuzz.request_steps import Step
from tests.fuzz.requests import REGRESSIONS as OUT
from tidemq.client.remoting.codes import RequestCode as C
from tidemq.client.remoting.codes import SerializeType as S


def create(topic: str = "fz-t0") -> Step:
    return Step(
        "master",
        C.UPDATE_AND_CREATE_TOPIC,
        S.JSON,
        {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": "4",
            "writeQueueNums": "4",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
        },
        op="setup",
    )


def send(n: int, topic: str = "fz-t0", serialize: S = S.MSGPACK) -> Step:
    ext = {
        "a": "fz-g0",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": f"KEYS\x01k{n}\x02TAGS\x01A\x02WAIT\x01true\x02",
    }
    return Step(
        "master",
        C.SEND_MESSAGE_V2,
        serialize,
        ext,
        f"fz|regression|{n}|".encode() + b"." * 64,
        track=True,
        op="send",
    )


def send_back(group: str, delay: str = "-1", serialize: S = S.JSON) -> Step:
    # offset 0: the first message of a fresh store
    return Step(
        "master",
        C.CONSUMER_SEND_MSG_BACK,
        serialize,
        {
            "offset": "0",
            "group": group,
            "delayLevel": delay,
            "originTopic": "fz-t0",
            "maxReconsumeTimes": "16",
        },
        op="send_back",
    )


def write(name: str, kind: str, detail: str, steps: list[Step]) -> None:
    (OUT / f"{name}.json").write_text(
        json.dumps(
            {"seed": None, "kind": kind, "detail": detail, "steps": [s.to_json() for s in steps]},
            indent=1,
            ensure_ascii=True,
        )
        + "\n"
    )


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    reconsumed = send(1)
    reconsumed.ext["j"] = str(2**31 - 1)  # reconsumeTimes
    reconsumed.track = False
    write(
        "send-back-of-a-message-reconsumed-2-31-1-times",
        "traceback",
        "c82965c: CONSUMER_SEND_MSG_BACK of a message sent with reconsumeTimes 2**31-1 raised "
        "struct.error packing 2**31 into the record (a traceback, SYSTEM_ERROR)",
        [create(), reconsumed, send_back("fz-g0", delay="1")],
    )
    group = {"groupName": "fz-g0", "retryQueueNums": [], "retryMaxTimes": {"a": 1}}
    topic = create("fz-t1")
    topic.ext["writeQueueNums"] = str(2**31 - 1)
    write(
        "group-config-and-topic-of-wrong-numbers",
        "traceback",
        "c82965c: a subscription group config whose numbers are a list and an object raised "
        "TypeError (a traceback); a topic of 2**31-1 write queues was created, and resetting "
        "its offsets looped over every queue on the broker's event loop (no answer)",
        [
            Step("master", C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, S.JSON, {},
                 json.dumps(group).encode(), op="group_config"),
            topic,
            Step("master", C.INVOKE_BROKER_TO_RESET_OFFSET, S.MSGPACK,
                 {"topic": "fz-t1", "group": "fz-g0", "timestamp": "-1", "isForce": "true"},
                 op="reset_offset"),
        ],
    )  # fmt: skip
    register = {"brokerName": "broker-a", "brokerAddr": "fzx", "clusterName": "DefaultCluster",
                "haServerAddr": "fzx", "brokerId": "1"}  # fmt: skip
    write(
        "namesrv-registration-of-a-slave-without-port",
        "traceback",
        "c82965c: REGISTER_BROKER of broker-a id 1 at 'fzx' on the name server; at the next "
        "slave connection (the restart) the master's OffsetReconciler died of ValueError "
        "('not host:port'): a traceback, and another when the broker stopped",
        [Step("namesrv", C.REGISTER_BROKER, S.JSON, register, op="single")],
    )
    write(
        "send-back-group-escapes-the-store",
        "outside-store",
        "c82965c: CONSUMER_SEND_MSG_BACK of group '/../../../fzx-dlq' made %DLQ%/../../../fzx-dlq: "
        "a ConsumeQueue folder in the sandbox, outside the master's and the slave's store roots",
        [create(), send(1), send_back("/../../../fzx-dlq")],
    )
    write(
        "send-back-group-with-nul",
        "dispatch",
        "c82965c: CONSUMER_SEND_MSG_BACK of group 'fz\\x00g' made topic %DLQ%fz\\x00g; its "
        "dispatch raised 'embedded null byte' and stopped on master and slave, and the restart",
        [create(), send(1), send_back("fz\x00g"), send(2)],
    )
    write(
        "delete-topic-outside-the-store",
        "traceback",
        "c82965c: DELETE_TOPIC_IN_BROKER of '../../../victim' deleted ConsumeQueue files of "
        "<base>/run/victim, outside the store (OSError on its folder)",
        [
            create(),
            send(1),
            Step(
                "master",
                C.DELETE_TOPIC_IN_BROKER,
                S.JSON,
                {"topic": "../../../victim"},
                op="delete_topic",
            ),
        ],
    )
    write(
        "delete-topic-empty-name",
        "traceback",
        "c82965c: DELETE_TOPIC_IN_BROKER of '' set out to delete the consumequeue folder itself: "
        "OSError removing consumequeue/fz-t0, a traceback and SYSTEM_ERROR",
        [
            create(),
            send(1),
            send(2),
            Step("master", C.DELETE_TOPIC_IN_BROKER, S.ROCKETMQ, {"topic": ""}, op="delete_topic"),
        ],
    )
    hb: dict[str, object] = {
        "clientID": "fz-client",
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": "/../../../fzx-hb",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "classFilterMode": False,
                        "topic": "fz-t0",
                        "subString": "*",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 0,
                        "expressionType": "TAG",
                    }
                ],
            }
        ],
    }
    write(
        "heartbeat-creates-retry-topic-of-a-path",
        "illegal-name",
        "c82965c: HEART_BEAT of consumer group '/../../../fzx-hb' auto-created topic "
        "%RETRY%/../../../fzx-hb (and the group)",
        [
            create(),
            Step("master", C.HEART_BEAT, S.JSON, {}, json.dumps(hb).encode(), op="heartbeat"),
        ],
    )
    write(
        "send-back-retry-topic-too-long",
        "illegal-name",
        "c82965c: CONSUMER_SEND_MSG_BACK of a 200-character group made a %RETRY% topic of 207 "
        "characters (over 127), whose delay level then stayed blocked",
        [create(), send(1), send_back("g" * 200, delay="1")],
    )
    write(
        "group-aliasing-a-folder-breaks-restart",
        "restart",
        "c82965c: groups 'fz-t2' and 'fz-t2/' made %DLQ%fz-t2 and %DLQ%fz-t2/, one ConsumeQueue "
        "folder for two topics; the master then failed to start: FileExistsError renaming a .tmp",
        [create(), send(1), send_back("fz-t2"), send_back("fz-t2/"), send(2)],
    )


if __name__ == "__main__":
    main()
