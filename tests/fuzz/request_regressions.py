"""Write the hand-minimised inputs of the findings on c82965c (tests/fuzz/regressions/requests)."""
import json
from pathlib import Path
from tests.fuzz.request_steps import Step
from tidemq.client.remoting.codes import RequestCode as C, SerializeType as S

OUT = Path("tests/fuzz/regressions/requests")
OUT.mkdir(parents=True, exist_ok=True)

def create(topic="fz-t0"):
    return Step("master", C.UPDATE_AND_CREATE_TOPIC, S.JSON, {"topic": topic, "defaultTopic": "TBW102",
        "readQueueNums": "4", "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG"}, op="setup")

def send(n, topic="fz-t0", serialize=S.MSGPACK):
    ext = {"a": "fz-g0", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000",
           "h": "0", "i": f"KEYS\x01k{n}\x02TAGS\x01A\x02WAIT\x01true\x02"}
    return Step("master", C.SEND_MESSAGE_V2, serialize, ext, f"fz|regression|{n}|".encode() + b"." * 64,
                track=True, op="send")

def send_back(group, delay="-1", serialize=S.JSON):
    # offset 0: the first message of a fresh store
    return Step("master", C.CONSUMER_SEND_MSG_BACK, serialize, {"offset": "0", "group": group,
        "delayLevel": delay, "originTopic": "fz-t0", "maxReconsumeTimes": "16"}, op="send_back")

def write(name, kind, detail, steps):
    (OUT / f"{name}.json").write_text(json.dumps(
        {"seed": None, "kind": kind, "detail": detail, "steps": [s.to_json() for s in steps]},
        indent=1, ensure_ascii=True) + "\n")

write("send-back-group-escapes-the-store", "outside-store",
      "c82965c: CONSUMER_SEND_MSG_BACK of group '/../../../fzx-dlq' made %DLQ%/../../../fzx-dlq: "
      "a ConsumeQueue folder in the sandbox, outside the master's and the slave's store roots",
      [create(), send(1), send_back("/../../../fzx-dlq")])
write("send-back-group-with-nul", "dispatch",
      "c82965c: CONSUMER_SEND_MSG_BACK of group 'fz\\x00g' made topic %DLQ%fz\\x00g; its dispatch "
      "raised 'embedded null byte' and stopped on master and slave, and the restart",
      [create(), send(1), send_back("fz\x00g"), send(2)])
write("delete-topic-outside-the-store", "traceback",
      "c82965c: DELETE_TOPIC_IN_BROKER of '../../../victim' deleted ConsumeQueue files of "
      "<base>/run/victim, outside the store (OSError on its folder)",
      [create(), send(1), Step("master", C.DELETE_TOPIC_IN_BROKER, S.JSON,
                               {"topic": "../../../victim"}, op="delete_topic")])
write("delete-topic-empty-name", "traceback",
      "c82965c: DELETE_TOPIC_IN_BROKER of '' set out to delete the consumequeue folder itself: "
      "OSError removing consumequeue/fz-t0, a traceback and SYSTEM_ERROR",
      [create(), send(1), send(2), Step("master", C.DELETE_TOPIC_IN_BROKER, S.ROCKETMQ,
                                        {"topic": ""}, op="delete_topic")])
hb = {"clientID": "fz-client", "producerDataSet": [], "consumerDataSet": [{
    "groupName": "/../../../fzx-hb", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
    "subscriptionDataSet": [{"classFilterMode": False, "topic": "fz-t0", "subString": "*",
                             "tagsSet": [], "codeSet": [], "subVersion": 0, "expressionType": "TAG"}]}]}
write("heartbeat-creates-retry-topic-of-a-path", "illegal-name",
      "c82965c: HEART_BEAT of consumer group '/../../../fzx-hb' auto-created topic "
      "%RETRY%/../../../fzx-hb (and the group)",
      [create(), Step("master", C.HEART_BEAT, S.JSON, {}, json.dumps(hb).encode(), op="heartbeat")])
write("send-back-retry-topic-too-long", "illegal-name",
      "c82965c: CONSUMER_SEND_MSG_BACK of a 200-character group made a %RETRY% topic of 207 "
      "characters (over 127), whose delay level then stayed blocked",
      [create(), send(1), send_back("g" * 200, delay="1")])
write("group-aliasing-a-folder-breaks-restart", "restart",
      "c82965c: groups 'fz-t2' and 'fz-t2/' made %DLQ%fz-t2 and %DLQ%fz-t2/, one ConsumeQueue "
      "folder for two topics; the master then failed to start: FileExistsError renaming a .tmp",
      [create(), send(1), send_back("fz-t2"), send_back("fz-t2/"), send(2)])
print(sorted(p.name for p in OUT.iterdir()))
