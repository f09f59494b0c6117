"""The transaction check (RocketMQ's TransactionalMessageCheckService), on a master only.

Every transactionCheckInterval ms one round walks the half queue from the check's progress
(CID_RMQ_SYS_TRANS's offset) up to what was there when the round began:

- a unit that is not the latest copy of a pending transaction is passed (its transaction ended,
  or a later copy stands for it): an ended transaction is never checked;
- a half message younger than its immunity (transactionTimeOut, or its
  CHECK_IMMUNITY_TIME_IN_SECONDS when longer) ends the round, unless it has its own longer
  immunity: then a copy goes to the end of the queue, not counted as a check, so that it does not
  hold back the messages behind it;
- one checked transactionCheckMax times goes to TRANS_CHECK_MAX_TIME_TOPIC, with an op message;
- any other gets a copy at the end of the half queue with TRANSACTION_CHECK_TIMES + 1, and
  CHECK_TRANSACTION_STATE (39) for that copy goes, oneway, over the connection of a producer of
  its group (PGROUP). The producer answers with END_TRANSACTION (fromTransactionCheck).

The progress is committed after each unit, so a stop or a restart resumes where the round ended.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from tidemq.broker.managers.clients import ProducerManager
from tidemq.broker.state import BrokerState
from tidemq.broker.transaction.messages import (
    CHECK_MAX_TIME_TOPIC,
    HALF_QUEUE_ID,
    HALF_TOPIC,
    check_times,
    checked_copy,
    discarded_message,
    for_check,
    immunity_ms,
    origin_of,
)
from tidemq.broker.transaction.service import TransactionalMessageService, units_from
from tidemq.client.protocol.headers import CheckTransactionStateRequestHeader, encode
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.store.record import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_UNIQ_KEY,
    StoredMessage,
    check_record,
    decode_properties,
    message_id,
    pack_record,
)

log = logging.getLogger(__name__)


@runtime_checkable
class CheckChannel(Protocol):
    """A producer that is asked to resolve a half message other than by remoting (a 5.x
    client's Telemetry stream); False when it cannot be asked now."""

    def check_transaction(self, half: StoredMessage, transaction_id: str) -> bool: ...


_MAX_BODY = 1 << 27
YIELD_EVERY = 512


def check_body(half: StoredMessage) -> bytes:
    """CHECK_TRANSACTION_STATE's body: the half message's record, in its real topic."""
    msg = for_check(half)
    return pack_record(
        msg,
        check_record(msg, _MAX_BODY),
        half.queue_offset,
        half.physical_offset,
        half.store_timestamp,
    )


class TransactionCheckService(Service):
    """Children: the rounds (one task), then at stop nothing else: progress is committed as
    it is made and persisted with the consumer offsets."""

    def __init__(
        self,
        state: BrokerState,
        transactions: TransactionalMessageService,
        producers: ProducerManager,
        ensure_topic: Callable[[str], None],
    ) -> None:
        super().__init__()
        self.state = state
        self.transactions = transactions
        self.store = transactions.store
        self.producers = producers
        self.ensure_topic = ensure_topic
        self.checks_sent = 0
        self.discarded = 0
        self.add_child(Step(start=transactions.load))
        self.add_child(BackgroundTask(self._rounds, "transaction-check"))

    async def _rounds(self) -> None:
        while True:
            await asyncio.sleep(self.state.config.transaction_check_interval / 1000)
            try:
                await self.check_once()
            except Exception:
                log.exception("transaction check failed")

    async def check_once(self) -> None:
        """One round (module docstring)."""
        half_queue = self.store.find_consume_queue(HALF_TOPIC, HALF_QUEUE_ID)
        if half_queue is None:
            return
        config = self.state.config
        transactions = self.transactions
        end = half_queue.max_offset
        for scanned, (queue_offset, physical, size) in enumerate(
            units_from(half_queue, transactions.check_offset)
        ):
            if queue_offset >= end:
                return
            if scanned % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # a long backlog of ended ones must not hold the loop
            if transactions.pending.origin_at(queue_offset) is None:
                half = None  # ended, or a later copy stands for it: not even read
            else:
                half = self.store.look_message_by_offset(physical, size)
            if half is not None and transactions.is_current(half):
                now = int(time.time() * 1000)
                immunity = immunity_ms(half, config.transaction_time_out)
                if now - half.born_timestamp < immunity:
                    own = PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS in half.properties
                    if not own or immunity <= config.transaction_time_out:
                        return  # the ones behind it are younger still
                    if not await self._put_copy(half, count_check=False):
                        return
                elif check_times(half) >= config.transaction_check_max:
                    if not await self._discard(half):
                        return
                else:
                    if not await self._put_copy(half, count_check=True):
                        return
            transactions.set_check_offset(queue_offset + 1)

    async def _put_copy(self, half: StoredMessage, *, count_check: bool) -> bool:
        msg = checked_copy(half, count_check=count_check)
        result = await self.store.put_message(msg)
        append = result.append
        if not result.ok or append is None:
            log.warning("half message %d not renewed: %s", half.queue_offset, result.status.value)
            return False
        pending = self.transactions.pending
        origin = origin_of(half)
        if pending.get(origin) != half.queue_offset:
            # Ended (or renewed) while the copy was stored: the copy stands for nothing, and
            # the transaction must not come back to life through it.
            return True
        pending.put(origin, append.queue_offset)
        if count_check:
            copy = dataclasses.replace(
                half,
                queue_offset=append.queue_offset,
                physical_offset=append.wrote_offset,
                store_timestamp=append.store_timestamp,
                properties=decode_properties(msg.properties),
            )
            await self._send_check(copy)
        return True

    async def _discard(self, half: StoredMessage) -> bool:
        # Taken out of the table first, as an END does: an END arriving meanwhile is
        # refused, so the message is not both committed and discarded.
        pending = self.transactions.pending
        origin = origin_of(half)
        latest = pending.pop(origin)
        if latest is None:
            return True  # ended meanwhile
        self.ensure_topic(CHECK_MAX_TIME_TOPIC)
        result = await self.store.put_message(discarded_message(half))
        if not result.ok:
            pending.put(origin, latest)
            log.warning("half message %d not discarded: %s", half.queue_offset, result.status.value)
            return False
        await self.transactions.write_op(half.queue_offset)
        self.discarded += 1
        log.warning(
            "half message %d of group %s checked %d times: moved to %s",
            half.queue_offset,
            half.properties.get(PROPERTY_PRODUCER_GROUP, ""),
            check_times(half),
            CHECK_MAX_TIME_TOPIC,
        )
        return True

    async def _send_check(self, half: StoredMessage) -> None:
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        channel: object = self.producers.get_available_channel(group)
        if isinstance(channel, CheckChannel):  # a RocketMQ 5 producer (broker/proxy/channel.py)
            transaction_id = message_id(self.state.store_host, half.physical_offset)
            if channel.check_transaction(half, transaction_id):
                self.checks_sent += 1
            else:
                log.info("check of half message %d: %s has no stream", half.queue_offset, channel)
            return
        if not isinstance(channel, RemotingConnection):
            log.info(
                "no producer of group %s online to check half message %d", group, half.queue_offset
            )
            return
        uniq = half.properties.get(PROPERTY_UNIQ_KEY)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=half.queue_offset,
            commit_log_offset=half.physical_offset,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=message_id(self.state.store_host, half.physical_offset),
        )
        request = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE, encode(header), check_body(half), oneway=True
        )
        try:
            await channel.oneway(request)
        except (ConnectionError, TimeoutError) as exc:
            log.info(
                "check of half message %d not sent to %s: %s", half.queue_offset, channel.peer, exc
            )
            return
        self.checks_sent += 1
