"""The messages of a transaction as the broker stores them (RocketMQ 4.x's formats).

- Half message: a prepared send (property TRAN_MSG=true, PGROUP, sysFlag PREPARED) is stored in
  RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its topic and queue in REAL_TOPIC / REAL_QID and the
  transaction bits of its sysFlag cleared, so that dispatch gives it a unit in the half queue
  (a PREPARED record gets none) and no consumer of the real topic sees it.
- Copy: a check re-puts the half message at the end of the half queue with
  TRANSACTION_CHECK_TIMES + 1 and TRAN_PREPARED_QUEUE_OFFSET, the queue offset of the first copy
  (the transaction's "origin": every copy of one transaction has the same).
- Committed message: the half message back in REAL_TOPIC / REAL_QID, those two properties and
  TRAN_MSG removed, sysFlag COMMIT, preparedTransactionOffset the half message's CommitLog offset.
- Op message: RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, tag `d`, body the ended half message's queue
  offset in decimal (RocketMQ's TransactionalMessageUtil.REMOVE_TAG and body).

END_TRANSACTION reads the half message where it lies (`read_half`: a view of the mapped file, its
properties decoded, nothing else) and builds the committed message's record from the half
record's bytes (`commit_record`: head, hosts and body copied, queue id, sysFlag,
preparedTransactionOffset and the properties changed; the body's CRC is the half's), the same
bytes `committed_message` + the store's encoding give. It is appended with its op message in one
put (`MessageStore.put_encoded`).
- Discarded: a half message checked transactionCheckMax times goes to TRANS_CHECK_MAX_TIME_TOPIC
  queue 0 as it is (properties kept, so REAL_TOPIC says where it was going).
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Final

from tidemq.common import speedups
from tidemq.store.crc import java_crc32
from tidemq.store.delay import DELAY_MARKER
from tidemq.store.layout import (
    FLAG_BORNHOST_V6,
    FLAG_STOREHOST_V6,
    MAGIC_V1,
    OFFSET_BORN_HOST,
    OFFSET_QUEUE_ID,
    OFFSET_SYS_FLAG,
    PREFIX_FORMAT,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_MASK,
    TRANSACTION_NOT_TYPE,
)
from tidemq.store.record import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_WAIT,
    EncodedRecord,
    MessageToStore,
    StoredMessage,
    check_record_parts,
    decode_properties,
    encode_properties,
    host_sys_flags,
    pack_host,
    with_property,
)
from tidemq.store.timer_message import TIMER_MARKER

HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
# The consumer group under which the check's progress in the half queue is kept (MixAll).
CHECK_GROUP: Final = "CID_RMQ_SYS_TRANS"
REMOVE_TAG: Final = "d"
HALF_QUEUE_ID: Final = 0

# A send is a half message when its properties hold TRAN_MSG=true (Boolean.parseBoolean).
_PREPARED_MARKER: Final = f"{PROPERTY_TRANSACTION_PREPARED}\x01"


# A half message as our producer sends it: TRAN_MSG=true first, and named nowhere else.
_PREPARED_FIRST: Final = f"{PROPERTY_TRANSACTION_PREPARED}\x01true\x02"
_PREPARED_AGAIN: Final = f"\x02{_PREPARED_MARKER}"


def is_prepared_send(properties: str) -> bool:
    """True when a send's properties ask for a half message (TRAN_MSG=true, any case)."""
    if _PREPARED_MARKER not in properties:
        return False
    if properties.startswith(_PREPARED_FIRST) and _PREPARED_AGAIN not in properties:
        return True  # what decoding them says, without the dict: no other TRAN_MSG item
    value = decode_properties(properties).get(PROPERTY_TRANSACTION_PREPARED, "")
    return value.strip().lower() == "true"


def park_half(msg: MessageToStore) -> None:
    """Turn a prepared send into its half message, in place (parseHalfMessageInner). The two
    properties are set by `with_property` (compiled: no dict), which gives what decoding the
    text, setting them and encoding it again gives."""
    msg.properties = with_property(
        with_property(msg.properties, PROPERTY_REAL_TOPIC, msg.topic),
        PROPERTY_REAL_QUEUE_ID,
        str(msg.queue_id),
    )
    msg.sys_flag = (msg.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_NOT_TYPE
    msg.topic = HALF_TOPIC
    msg.queue_id = HALF_QUEUE_ID


def origin_of(half: StoredMessage | HalfRecord) -> int:
    """The queue offset of a transaction's first half message (the same for all its copies)."""
    if isinstance(half, HalfRecord):
        text = half.prepared_queue_offset
    else:
        text = half.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
    # ASCII digits only: str.isdigit takes "²", which int() refuses (a client may send the
    # property itself)
    if text is not None and text.isascii() and text.lstrip("-").isdigit():
        return int(text)
    return half.queue_offset


def check_times(half: StoredMessage) -> int:
    text = half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0")
    return int(text) if text.isascii() and text.isdigit() else 0


def immunity_ms(half: StoredMessage, transaction_timeout_ms: int) -> int:
    """How long after its birth a half message is left alone (getImmunityTime): its
    CHECK_IMMUNITY_TIME_IN_SECONDS, but never less than transactionTimeOut."""
    text = half.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, "")
    try:
        own = int(text) * 1000
    except ValueError:
        own = 0
    return max(own, transaction_timeout_ms)


def _from_stored(
    stored: StoredMessage, topic: str, queue_id: int, props: dict[str, str]
) -> MessageToStore:
    """A copy that keeps the half message's store host too (RocketMQ's renewHalfMessageInner)."""
    return stored.moved(topic, queue_id, props, pack_host(*stored.store_host))


def _commit_target(half_properties: dict[str, str]) -> tuple[str, int, dict[str, str]] | None:
    """Where a half message's commit goes (REAL_TOPIC, REAL_QID) and the commit's properties:
    the half's without those and the prepared marks, WAIT false (the producer's END waits for
    the answer, not the flush); None when the half does not say where it was going."""
    props = dict(half_properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, None)
    queue = props.pop(PROPERTY_REAL_QUEUE_ID, None)
    if not topic or queue is None or not (queue.isascii() and queue.isdigit()):
        return None  # ASCII digits only: str.isdigit takes "²", which int() refuses
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    props.pop(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, None)
    props[PROPERTY_WAIT] = "false"
    return topic, int(queue), props


def committed_message(half: StoredMessage) -> MessageToStore | None:
    """The message a commit stores in the real topic (endMessageTransaction), or None when the
    half message does not say where it was going."""
    target = _commit_target(half.properties)
    if target is None:
        return None
    topic, queue_id, props = target
    msg = _from_stored(half, topic, queue_id, props)
    msg.sys_flag = (half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE
    msg.prepared_transaction_offset = half.physical_offset
    return msg


_PREFIX: Final = struct.Struct(PREFIX_FORMAT)
_INT: Final = struct.Struct(">i")
_SHORT: Final = struct.Struct(">h")
_LONG: Final = struct.Struct(">q")


def transaction_properties(
    raw: bytes | memoryview,
) -> tuple[str, str | None, bytes | None, str | None, int]:
    """What END_TRANSACTION reads of a half message's raw properties (UTF-8, invalid bytes
    replaced, decoded as `decode_properties` decodes them): its producer group ("" when none),
    its TRAN_PREPARED_QUEUE_OFFSET (None when none), and its commit's properties (UTF-8, as
    `encode_properties` writes `_commit_target`'s), real topic and queue id; those three are
    None, None, -1 when the half message does not say where it was going. The compiled twin
    reads the text in one pass, without a dict."""
    props = decode_properties(str(raw, "utf-8", "replace"))
    group = props.get(PROPERTY_PRODUCER_GROUP, "")
    prepared = props.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
    target = _commit_target(props)
    if target is None:
        return group, prepared, None, None, -1
    topic, queue_id, commit = target
    return group, prepared, encode_properties(commit).encode(), topic, queue_id


transaction_properties = speedups.select(
    transaction_properties, "tidemq.broker.transaction._records"
)


@dataclass(slots=True)
class HalfRecord:
    """A record read where it lies (`view`: its bytes in the mapped CommitLog, not a copy)
    and what END_TRANSACTION looks at: its queue offset, sysFlag, raw topic and what
    `transaction_properties` reads of its properties (decoded as `decode_record` decodes
    them). `body_at`/`body_end` bound its body."""

    view: memoryview
    physical_offset: int
    queue_offset: int
    sys_flag: int
    topic: bytes
    body_at: int
    body_end: int
    group: str
    prepared_queue_offset: str | None
    commit_properties: bytes | None
    real_topic: str | None
    real_queue_id: int


def read_half(view: memoryview) -> HalfRecord | None:
    """The record that `view` holds (from its start), or None where `decode_record` would
    refuse it (bad magic, lengths that disagree)."""
    size = len(view)
    if size < _PREFIX.size:
        return None
    total, magic, _crc, _queue_id, _flag, queue_offset, phy, sys_flag, _born = _PREFIX.unpack_from(
        view, 0
    )
    if magic != MAGIC_V1 or total < _PREFIX.size or total > size:
        return None
    at = _PREFIX.size + (20 if sys_flag & FLAG_BORNHOST_V6 else 8) + 8
    at += 20 if sys_flag & FLAG_STOREHOST_V6 else 8
    if at + 16 > total:
        return None
    body_at = at + 16
    body_len = _INT.unpack_from(view, at + 12)[0]
    body_end = body_at + body_len
    if body_len < 0 or body_end + 3 > total:
        return None
    topic_end = body_end + 1 + view[body_end]
    if topic_end + 2 > total:
        return None
    props_len = _SHORT.unpack_from(view, topic_end)[0]
    if props_len < 0 or topic_end + 2 + props_len != total:
        return None
    return HalfRecord(
        view,
        phy,
        queue_offset,
        sys_flag,
        bytes(view[body_end + 1 : topic_end]),
        body_at,
        body_end,
        *transaction_properties(view[topic_end + 2 : total]),
    )


read_half = speedups.select(read_half, "tidemq.broker.transaction._records")


# Properties that make the store move a message elsewhere (a delay level, a timer): such a
# commit goes through `MessageStore.put_message` (`committed_message`).
_PARKING_MARKERS: Final = (DELAY_MARKER.encode(), TIMER_MARKER.encode())


def commit_record(half: HalfRecord, max_message_size: int) -> EncodedRecord | None:
    """The committed message's record (append-time fields left to the append) built from the
    half record's bytes; what `encode_record(committed_message(decoded half))` gives. None
    when the half message does not say where it was going, or when its commit must go through
    the store's parking of delayed and timer messages (`committed_message` then).
    RecordTooLargeError for a limit the commit breaks."""
    props_raw = half.commit_properties
    topic = half.real_topic
    if props_raw is None or topic is None:
        return None
    for marker in _PARKING_MARKERS:
        if marker in props_raw:
            return None
    queue_id = half.real_queue_id
    view = half.view
    topic_raw = topic.encode()
    body_at, body_end = half.body_at, half.body_end
    total = body_end + 3 + len(topic_raw) + len(props_raw)
    sys_flag = (half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE
    check_record_parts(body_end - body_at, sys_flag, topic_raw, props_raw, total, max_message_size)
    data = bytearray(view[:body_end])
    _INT.pack_into(data, 0, total)
    _INT.pack_into(data, OFFSET_QUEUE_ID, queue_id)
    _INT.pack_into(data, OFFSET_SYS_FLAG, sys_flag)
    _LONG.pack_into(data, body_at - 12, half.physical_offset)  # PREPAREDTRANSACTIONOFFSET
    data.append(len(topic_raw))
    data += topic_raw
    data += _SHORT.pack(len(props_raw))
    data += props_raw
    store_ts_at = OFFSET_BORN_HOST + (20 if sys_flag & FLAG_BORNHOST_V6 else 8)
    return EncodedRecord(data, store_ts_at, topic, queue_id, sys_flag)


commit_record = speedups.select(commit_record, "tidemq.broker.transaction._records")


def checked_copy(half: StoredMessage, *, count_check: bool) -> MessageToStore:
    """The copy a check puts at the end of the half queue: the origin recorded and, when it
    counts as a check, TRANSACTION_CHECK_TIMES one higher."""
    props = dict(half.properties)
    props[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(origin_of(half))
    if count_check:
        props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(check_times(half) + 1)
    props[PROPERTY_WAIT] = "false"
    return _from_stored(half, HALF_TOPIC, HALF_QUEUE_ID, props)


def discarded_message(half: StoredMessage) -> MessageToStore:
    """The message put in TRANS_CHECK_MAX_TIME_TOPIC after the last check (resolveDiscardMsg)."""
    props = dict(half.properties)
    props[PROPERTY_WAIT] = "false"
    return _from_stored(half, CHECK_MAX_TIME_TOPIC, 0, props)


def for_check(half: StoredMessage) -> MessageToStore:
    """The half message as CHECK_TRANSACTION_STATE's body carries it: in its real topic and
    queue, as the producer sent it."""
    topic = half.properties.get(PROPERTY_REAL_TOPIC) or half.topic
    queue = half.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    return _from_stored(
        half,
        topic,
        int(queue) if queue.isascii() and queue.isdigit() else half.queue_id,
        dict(half.properties),
    )


_OP_PROPERTIES: Final = encode_properties({PROPERTY_TAGS: REMOVE_TAG, PROPERTY_WAIT: "false"})


def op_message(half_queue_offset: int, store_host: bytes, now: int | None = None) -> MessageToStore:
    """The op message recording that the half message at `half_queue_offset` has ended
    (born `now`, ms; the clock's time when None)."""
    if now is None:
        now = int(time.time() * 1000)
    return MessageToStore(
        topic=OP_TOPIC,
        queue_id=HALF_QUEUE_ID,
        body=str(half_queue_offset).encode(),
        properties=_OP_PROPERTIES,
        born_timestamp=now,
        born_host=store_host,
        store_host=store_host,
    )


_OP_TAIL: Final = b"".join(
    (
        bytes((len(OP_TOPIC.encode()),)),
        OP_TOPIC.encode(),
        _SHORT.pack(len(_OP_PROPERTIES.encode())),
        _OP_PROPERTIES.encode(),
    )
)
# The head of an op record up to its body, by the store host's length (IPv4 8, IPv6 20): fields
# 1-9, BORNHOST, STORETIMESTAMP, STOREHOST, RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH.
_OP_HEADS: Final = {n: struct.Struct(f">iiiiiqqiq{n}sq{n}siqi") for n in (8, 20)}


def op_record(half_queue_offset: int, store_host: bytes, now: int | None = None) -> EncodedRecord:
    """`op_message`'s record as the store encodes it (`encode_record`), but for its
    append-time fields: packed from a template (every op record is the same but for its body,
    its birth and its length)."""
    if now is None:
        now = int(time.time() * 1000)
    body = str(half_queue_offset).encode()
    head = _OP_HEADS.get(len(store_host))
    if head is None:
        raise ValueError(f"a store host of {len(store_host)} bytes: not 8 or 20")
    sys_flag = host_sys_flags(store_host, store_host)
    data = bytearray(
        head.pack(
            head.size + len(body) + len(_OP_TAIL),
            MAGIC_V1,
            java_crc32(body),
            HALF_QUEUE_ID,
            0,  # flag
            0,  # queue offset, physical offset: at append
            0,
            sys_flag,
            now,
            store_host,
            0,  # store timestamp: at append
            store_host,
            0,  # reconsume times
            0,  # prepared transaction offset
            len(body),
        )
    )
    data += body
    data += _OP_TAIL
    return EncodedRecord(
        data, OFFSET_BORN_HOST + len(store_host), OP_TOPIC, HALF_QUEUE_ID, sys_flag
    )


op_record = speedups.select(op_record, "tidemq.broker.transaction._records")


def op_half_offset(op: StoredMessage) -> int | None:
    """The half queue offset an op message ends (None for a body that is not one)."""
    text = op.body.decode("ascii", "replace").split(",")[0].strip()
    return int(text) if text.isascii() and text.isdigit() else None
