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
- Discarded: a half message checked transactionCheckMax times goes to TRANS_CHECK_MAX_TIME_TOPIC
  queue 0 as it is (properties kept, so REAL_TOPIC says where it was going).
"""

from __future__ import annotations

import time
from typing import Final

from tidemq.store.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_MASK, TRANSACTION_NOT_TYPE
from tidemq.store.record import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_WAIT,
    MessageToStore,
    StoredMessage,
    decode_properties,
    encode_properties,
    pack_host,
)

HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
# The consumer group under which the check's progress in the half queue is kept (MixAll).
CHECK_GROUP: Final = "CID_RMQ_SYS_TRANS"
REMOVE_TAG: Final = "d"
HALF_QUEUE_ID: Final = 0

# A send is a half message when its properties hold TRAN_MSG=true (Boolean.parseBoolean).
_PREPARED_MARKER: Final = f"{PROPERTY_TRANSACTION_PREPARED}\x01"


def is_prepared_send(properties: str) -> bool:
    """True when a send's properties ask for a half message (TRAN_MSG=true, any case)."""
    if _PREPARED_MARKER not in properties:
        return False
    value = decode_properties(properties).get(PROPERTY_TRANSACTION_PREPARED, "")
    return value.strip().lower() == "true"


def park_half(msg: MessageToStore) -> None:
    """Turn a prepared send into its half message, in place (parseHalfMessageInner)."""
    props = decode_properties(msg.properties)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    msg.properties = encode_properties(props)
    msg.sys_flag = (msg.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_NOT_TYPE
    msg.topic = HALF_TOPIC
    msg.queue_id = HALF_QUEUE_ID


def origin_of(half: StoredMessage) -> int:
    """The queue offset of a transaction's first half message (the same for all its copies)."""
    text = half.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
    if text is not None and text.lstrip("-").isdigit():
        return int(text)
    return half.queue_offset


def check_times(half: StoredMessage) -> int:
    text = half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0")
    return int(text) if text.isdigit() else 0


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


def committed_message(half: StoredMessage) -> MessageToStore | None:
    """The message a commit stores in the real topic (endMessageTransaction), or None when the
    half message does not say where it was going."""
    props = dict(half.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, None)
    queue = props.pop(PROPERTY_REAL_QUEUE_ID, None)
    if not topic or queue is None or not queue.isdigit():
        return None
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    props.pop(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, None)
    props[PROPERTY_WAIT] = "false"  # the producer's END waits for the answer, not the flush
    msg = _from_stored(half, topic, int(queue), props)
    msg.sys_flag = (half.sys_flag & ~TRANSACTION_MASK) | TRANSACTION_COMMIT_TYPE
    msg.prepared_transaction_offset = half.physical_offset
    return msg


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
        half, topic, int(queue) if queue.isdigit() else half.queue_id, dict(half.properties)
    )


_OP_PROPERTIES: Final = encode_properties({PROPERTY_TAGS: REMOVE_TAG, PROPERTY_WAIT: "false"})


def op_message(half_queue_offset: int, store_host: bytes) -> MessageToStore:
    """The op message recording that the half message at `half_queue_offset` has ended."""
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


def op_half_offset(op: StoredMessage) -> int | None:
    """The half queue offset an op message ends (None for a body that is not one)."""
    text = op.body.decode("ascii", "replace").split(",")[0].strip()
    return int(text) if text.isdigit() else None
