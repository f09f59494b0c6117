"""What push and pull consumers share: queue allocation, start offsets, one pull request.

- `allocate_queues`: the group's queues of a topic for this client (RocketMQ's
  rebalanceByTopic): every queue when BROADCASTING; otherwise the allocation strategy over the
  sorted queue list and the sorted client ids the broker reports (keeping the current queues when
  the broker cannot be asked).
- `compute_pull_from`: where a newly assigned queue starts (computePullFromWhereWithException):
  the stored offset; else by ConsumeFromWhere (LAST: the queue's max offset; FIRST: 0;
  TIMESTAMP: the offset at that time); a retry topic starts at 0; -1 when not known yet.
- `open_offset_store`: the group's offsets on the brokers (CLUSTERING) or in a local file
  (BROADCASTING), loaded.
- `pull_queue`: one PULL_MESSAGE to the broker the previous answer suggested (master by default;
  any broker of the group when the master is gone), with the suspend and subscription flags and
  the commit-offset flag when the target is a master (a slave never takes offsets from pulls).
  Its records stay raw (`PullResult.body`) for the consumer's own decoder (`PullResult.received`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from tidemq.client.api import PullResult
from tidemq.client.consumer.allocate import AllocateStrategy
from tidemq.client.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from tidemq.client.errors import ClientError, TideMQError
from tidemq.client.instance import ClientInstance
from tidemq.client.protocol.headers import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    PullMessageRequestHeader,
)
from tidemq.client.protocol.heartbeat import (
    ConsumeFromWhere,
    ExpressionType,
    MessageModel,
    MessageQueue,
    SubscriptionData,
)
from tidemq.client.protocol.models import MASTER_ID
from tidemq.store.tags import MATCH_ALL, TagFilter, parse_tag_expression

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
PULL_TIMEOUT_SLACK = 15.0


async def allocate_queues(
    instance: ClientInstance,
    group: str,
    topic: str,
    model: MessageModel,
    strategy: AllocateStrategy,
    current: set[MessageQueue],
) -> set[MessageQueue]:
    queues = sorted(await instance.subscribe_queue_set(topic))
    if not queues:
        return set()
    if model is MessageModel.BROADCASTING:
        return set(queues)
    address = instance.any_broker_of_topic(topic)
    if address is None:
        return current
    try:
        cids = sorted(await instance.api.get_consumer_ids(address, group))
    except TideMQError as exc:
        log.info("consumer ids of %s from %s: %s", group, address, exc)
        return current
    return set(strategy.allocate(group, instance.client_id, queues, cids))


async def open_offset_store(
    instance: ClientInstance, group: str, model: MessageModel, directory: Path
) -> OffsetStore:
    store: OffsetStore
    if model is MessageModel.BROADCASTING:
        store = LocalFileOffsetStore(group, instance.client_id, directory)
    else:
        store = RemoteBrokerOffsetStore(group, instance.api, instance.find_offset_broker)
    await store.load()
    return store


async def compute_pull_from(
    instance: ClientInstance,
    store: OffsetStore,
    mq: MessageQueue,
    where: ConsumeFromWhere,
    timestamp: int,
) -> int:
    last = await store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
    if last >= 0:
        return last
    if last != -1:
        return -1
    if mq.topic.startswith(RETRY_PREFIX) or where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
        return 0
    address = await instance.find_offset_broker(mq.broker_name)
    if address is None:
        return -1
    try:
        if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            return await instance.api.search_offset(address, mq.topic, mq.queue_id, timestamp)
        return await instance.api.get_max_offset(address, mq.topic, mq.queue_id)
    except TideMQError as exc:
        log.info("start offset of %s: %s", mq, exc)
        return -1


async def pull_queue(
    instance: ClientInstance,
    group: str,
    mq: MessageQueue,
    offset: int,
    subscription: SubscriptionData,
    pull_from: dict[MessageQueue, int],
    store: OffsetStore,
    batch: int,
    suspend_ms: int,
) -> PullResult:
    broker_id = pull_from.get(mq, MASTER_ID)
    found = instance.find_broker_address_in_subscribe(mq.broker_name, broker_id, False)
    if found is None:
        await instance.update_route(mq.topic)
        found = instance.find_broker_address_in_subscribe(mq.broker_name, broker_id, False)
    if found is None:
        raise ClientError(f"no broker address for {mq.broker_name}")
    commit = await store.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY)
    flags = PULL_FLAG_SUBSCRIPTION
    if suspend_ms > 0:
        flags |= PULL_FLAG_SUSPEND
    if commit > 0 and not found.is_slave:
        flags |= PULL_FLAG_COMMIT_OFFSET
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=offset,
        max_msg_nums=batch,
        sys_flag=flags,
        commit_offset=max(commit, 0),
        suspend_timeout_millis=suspend_ms,
        sub_version=subscription.sub_version,
        subscription=subscription.sub_string,
        expression_type=subscription.expression_type.value,
    )
    timeout = suspend_ms / 1000 + PULL_TIMEOUT_SLACK
    result = await instance.api.pull(found.address, header, timeout=timeout, raw=True)
    pull_from[mq] = result.suggest_which_broker_id
    return result


def client_tag_filter(subscription: SubscriptionData) -> TagFilter:
    """The filter a consumer applies again to what it pulled: the tags themselves for a TAG
    subscription (brokers compare hash codes only); none for SQL92 (the broker evaluated it)."""
    if subscription.expression_type is ExpressionType.TAG:
        return parse_tag_expression(subscription.sub_string)
    return MATCH_ALL
