"""Copying the master's tables to a slave, and the master taking offsets back from its slaves.

SlaveSynchronize (RocketMQ's): on a SLAVE whose master address is known (from the registration
result), every slaveSynchronizeInterval (10 s; first after 3 s): GET_ALL_TOPIC_CONFIG and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG replace the slave's tables when their DataVersion differs;
GET_ALL_CONSUMER_OFFSET merges the master's offsets without ever moving one backwards (offsets
consumers committed to the slave while the master was down survive, RocketMQ #1094);
GET_ALL_DELAY_OFFSET replaces the delay progress; GET_TIMER_CHECK_POINT (RocketMQ 5) hands the
master's timer cursor and timer queue offset to the slave's wheel (broker/timer.py), also
between those, every 3 s (as RocketMQ 5's tick) when the interval is longer; GET_TIMER_METRICS
(RocketMQ 5) replaces the slave's timers-waiting-per-topic table (broker/timer_metrics.py).

OffsetReconciler (tidemq): when the master (re)starts, and whenever a slave connects to it, the
master asks each slave of its group (addresses from the name server's cluster info) for its
consumer offsets and adopts the larger offset of each queue: a master that was down does not
hand back its stale offsets to consumers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Callable

from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager, parse_offset_table
from tidemq.broker.managers.delay_offset import DelayOffsetTable, parse_delay_offsets
from tidemq.broker.managers.subscription_group import (
    SubscriptionGroupManager,
    SubscriptionGroupWrapper,
)
from tidemq.broker.managers.topic_config import TopicConfigManager, parse_topic_wrapper
from tidemq.broker.state import BrokerState
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import TideMQError
from tidemq.client.remoting.codes import RequestCode, SerializeType
from tidemq.client.remoting.signing import Signer
from tidemq.common.lifecycle import cancel_and_wait
from tidemq.store.timer_checkpoint import TimerProgress

log = logging.getLogger(__name__)

FIRST_SYNC_DELAY = 3.0
TIMER_CHECKPOINT_INTERVAL = 3.0
SYNC_TIMEOUT = 3.0


class SlaveSynchronize:
    def __init__(
        self,
        state: BrokerState,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        delay_offsets: DelayOffsetTable,
        interval_ms: int,
        *,
        tls: ssl.SSLContext | None = None,
        signer: Signer | None = None,
        on_timer_checkpoint: Callable[[TimerProgress], None] | None = None,
        on_timer_metrics: Callable[[object], None] | None = None,
    ) -> None:
        self.state = state
        self.on_timer_checkpoint = on_timer_checkpoint
        self.on_timer_metrics = on_timer_metrics
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.interval = interval_ms / 1000
        self.master_address: str | None = None
        self.api = BrokerAPI(
            serialize_type=SerializeType.JSON, timeout=SYNC_TIMEOUT, tls=tls, signer=signer
        )
        self.syncs = 0
        self._task: asyncio.Task[None] | None = None
        self._now = asyncio.Event()

    def set_master_address(self, address: str | None) -> None:
        if address and address != self.master_address:
            log.info("SlaveSynchronize: master is %s", address)
            self.master_address = address
            self._now.set()

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="slave-synchronize")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        await self.api.close()

    async def _run(self) -> None:
        await asyncio.sleep(min(FIRST_SYNC_DELAY, self.interval))
        # The timer checkpoint every tick (RocketMQ 5: 3 s), the whole tables every interval.
        tick = min(TIMER_CHECKPOINT_INTERVAL, self.interval)
        due = 0.0
        while True:
            master = self.master_address
            if master and master != self.state.advertised_address:
                full = self._now.is_set() or time.monotonic() >= due
                try:
                    if full:
                        due = time.monotonic() + self.interval
                        await self.sync_all(master)
                    else:
                        await self.sync_timer_checkpoint(master)
                except (TideMQError, ValueError) as exc:
                    log.warning("SlaveSynchronize from %s failed: %s", master, exc)
            self._now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), tick)

    async def sync_timer_checkpoint(self, master: str) -> None:
        """GET_TIMER_CHECK_POINT: the master's timer cursor and queue offset, to the wheel."""
        if self.on_timer_checkpoint is not None:
            api = self.api
            timers = await api.call(master, api.request(RequestCode.GET_TIMER_CHECK_POINT))
            self.on_timer_checkpoint(TimerProgress.decode(bytes(timers.body)))

    async def sync_timer_metrics(self, master: str) -> None:
        """GET_TIMER_METRICS (RocketMQ 5's SlaveSynchronize too): the master's timers waiting per
        topic, so that a slave shows them and an elected slave counts on from them. A master
        that does not serve the code (an older tidemq) is passed over."""
        if self.on_timer_metrics is None:
            return
        api = self.api
        try:
            answer = await api.call(master, api.request(RequestCode.GET_TIMER_METRICS))
            self.on_timer_metrics(json.loads(bytes(answer.body)))
        except (TideMQError, ValueError) as exc:
            log.debug("timer metrics of %s not copied: %s", master, exc)

    async def sync_all(self, master: str) -> None:
        api = self.api
        topics = await api.call(master, api.request(RequestCode.GET_ALL_TOPIC_CONFIG))
        self.topics.replace_all(parse_topic_wrapper(bytes(topics.body)))
        offsets = await api.call(master, api.request(RequestCode.GET_ALL_CONSUMER_OFFSET))
        merged = self.offsets.merge_from_master(parse_offset_table(bytes(offsets.body)))
        self.offsets.persist_quietly()
        delays = await api.call(master, api.request(RequestCode.GET_ALL_DELAY_OFFSET))
        self.delay_offsets.replace(parse_delay_offsets(bytes(delays.body)))
        groups = await api.call(master, api.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        self.groups.replace_all(SubscriptionGroupWrapper.decode(bytes(groups.body)))
        await self.sync_timer_checkpoint(master)
        await self.sync_timer_metrics(master)
        self.syncs += 1
        log.debug("SlaveSynchronize from %s done: %s", master, merged)


class OffsetReconciler:
    """On a master: adopt the larger consumer offsets its slaves hold."""

    def __init__(
        self,
        state: BrokerState,
        offsets: ConsumerOffsetManager,
        tls: ssl.SSLContext | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.state = state
        self.offsets = offsets
        self.api = BrokerAPI(
            serialize_type=SerializeType.JSON, timeout=SYNC_TIMEOUT, tls=tls, signer=signer
        )
        self._running: asyncio.Task[None] | None = None

    def request(self) -> None:
        if self._running is None or self._running.done():
            self._running = asyncio.get_running_loop().create_task(self._reconcile())

    async def _reconcile(self) -> None:
        config = self.state.config
        for namesrv in config.name_servers:
            try:
                info = await self.api.get_cluster_info(namesrv)
            except TideMQError as exc:
                log.debug("offset reconcile: cluster info from %s failed: %s", namesrv, exc)
                continue
            data = info.broker_addr_table.get(config.broker_name)
            slaves = [a for i, a in (data.broker_addrs.items() if data else []) if i != 0]
            for address in slaves:
                try:
                    response = await self.api.call(
                        address, self.api.request(RequestCode.GET_ALL_CONSUMER_OFFSET)
                    )
                except (TideMQError, ValueError) as exc:
                    # ValueError: a registration on the name server gave an address that is not
                    # host:port; the task died of it with a traceback (request fuzzer, issue 30)
                    log.info("offset reconcile: slave %s did not answer: %s", address, exc)
                    continue
                result = self.offsets.merge_from_master(parse_offset_table(bytes(response.body)))
                log.info("offset reconcile with slave %s: %s", address, result)
                self.offsets.persist_quietly()
            return

    async def stop(self) -> None:
        await cancel_and_wait(self._running)
        await self.api.close()
