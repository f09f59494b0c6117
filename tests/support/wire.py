"""Request headers for driving a broker over the wire in tests (client.api's BrokerAPI).

`send_header(topic, queue_id, **props)`: a SEND_MESSAGE header of producer group "PG" whose
properties are `props`. `pull_header(topic, queue_id, offset, ...)`: a PULL_MESSAGE header for
up to 32 messages with subscription flag, optionally suspended (long polling) and committing.
"""

from __future__ import annotations

import time

from tidemq.client.protocol.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
    SendMessageRequestHeader,
)
from tidemq.store.record import encode_properties


def send_header(topic: str, queue_id: int, **props: str) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="PG",
        topic=topic,
        queue_id=queue_id,
        born_timestamp=int(time.time() * 1000),
        properties=encode_properties(props),
        default_topic_queue_nums=4,
    )


def pull_header(
    topic: str,
    queue_id: int,
    offset: int,
    *,
    suspend_ms: int = 0,
    commit: int = 0,
    group: str = "CG",
    subscription: str = "*",
    expression_type: str | None = None,
) -> PullMessageRequestHeader:
    flags = PULL_FLAG_SUBSCRIPTION
    if suspend_ms:
        flags |= PULL_FLAG_SUSPEND
    if commit:
        flags |= PULL_FLAG_COMMIT_OFFSET
    return PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_msg_nums=32,
        sys_flag=flags,
        commit_offset=commit,
        suspend_timeout_millis=suspend_ms,
        sub_version=0,
        subscription=subscription,
        expression_type=expression_type,
    )
