"""The broker (RocketMQ's BrokerController): store, managers, processors, registration.

Start order: load the store (recovery) and the managers' files, start the store's services,
load the timer store (store/timer_store.py), listen, start HA (the slave's client and the
filling of its timer wheel, or the master's service, the delayed-message schedule and timer
delivery: broker/timer.py), long polling, register with the name servers, then the periodic
tasks and metrics. Each is a child of the broker's `Service` and stops in reverse, except that
right after metrics the broker stops serving: held pulls answer, the server stops and lets
requests in flight finish, the schedule, timer delivery and HA stop. Then the periodic tasks
end, the broker unregisters, every table is persisted (its last changes to config/tables.db,
then its RocketMQ JSON file exported in full, when exportConfigJsonOnShutdown), the store
flushes and stops (which removes the abort file), and the name-server client closes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tidemq.broker.acl.own_account import OwnAccountSigner
from tidemq.broker.acl.rules import AclRules
from tidemq.broker.acl.validator import PlainAccessValidator
from tidemq.broker.acl.watch import AclWatcher, acl_paths, rocketmq_home
from tidemq.broker.config import BrokerConfig, RemotingConfig
from tidemq.broker.failover import GroupController, divergence_point
from tidemq.broker.ha_guard import ha_connect, ha_listen, master_proof
from tidemq.broker.ha_members import GroupMembers
from tidemq.broker.health import Health, check_health
from tidemq.broker.long_polling import PullRequestHoldService
from tidemq.broker.managers.clients import Channel, ConsumerManager, ProducerManager
from tidemq.broker.managers.config_file import ConfigManager, config_dir
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.delay_offset import DelayOffsetTable
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigChanged, TopicConfigManager
from tidemq.broker.metrics import BrokerCollector, MetricsServer, registry_for
from tidemq.broker.name_gate import NameGate
from tidemq.broker.offset_log import OffsetLog
from tidemq.broker.pop.service import PopService
from tidemq.broker.processors import handlers
from tidemq.broker.processors.admin import AdminProcessor
from tidemq.broker.processors.consumer import ConsumerProcessor
from tidemq.broker.processors.end_transaction import EndTransactionProcessor
from tidemq.broker.processors.group_admin import GroupAdminProcessor
from tidemq.broker.processors.operators5 import Operators5Processor
from tidemq.broker.processors.ops import OpsProcessor, mask_permission
from tidemq.broker.processors.pop import PopProcessor
from tidemq.broker.processors.pull import PullProcessor
from tidemq.broker.processors.query import QueryProcessor
from tidemq.broker.processors.retry import RetryProcessor
from tidemq.broker.processors.send import SendProcessor
from tidemq.broker.proxy.auth import GrpcGuard
from tidemq.broker.proxy.cluster_routes import CALL_TIMEOUT_SECONDS, ClusterRoutes
from tidemq.broker.proxy.config import ProxyConfig
from tidemq.broker.proxy.server import GrpcServer
from tidemq.broker.proxy.service import MessagingService
from tidemq.broker.rebalance_lock import RebalanceLockManager
from tidemq.broker.recall import RecallService
from tidemq.broker.registration import (
    BrokerIdentity,
    NameServerRegistration,
    RegistrationShape,
    RegistrationTable,
)
from tidemq.broker.remoting.server import AtOnceProcessor, RemotingServer
from tidemq.broker.schedule import ScheduleMessageService
from tidemq.broker.slave_names import SlaveNames
from tidemq.broker.slave_sync import OffsetReconciler, SlaveSynchronize
from tidemq.broker.state import BrokerState
from tidemq.broker.stats import BrokerStats, RateSampler, StatsWindows
from tidemq.broker.timer import TimerMessageService
from tidemq.broker.timer_metrics import TimerMetrics
from tidemq.broker.transaction.check import TransactionCheckService
from tidemq.broker.transaction.service import TransactionalMessageService
from tidemq.client.api import BrokerAPI
from tidemq.client.protocol.models import (
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from tidemq.client.protocol.namesrv import RegisterBrokerResult
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.json_body import dumps
from tidemq.client.transport.client import RemotingClient
from tidemq.client.transport.connection import RemotingConnection
from tidemq.common.lifecycle import BackgroundTask, Service, Step
from tidemq.ha.config import HAConfig
from tidemq.ha.controller_config import ControllerConfig
from tidemq.ha.epoch_file import EpochEntry, EpochFile
from tidemq.ha.master import HAService
from tidemq.ha.slave import ClientState, EpochHandshake, HAClient
from tidemq.store.config import BrokerRole, StoreConfig
from tidemq.store.message_store import MessageStore
from tidemq.store.record import pack_host
from tidemq.store.timer_checkpoint import TimerProgress
from tidemq.store.timer_message import TIMER_TOPIC
from tidemq.store.timer_store import TimerStore

log = logging.getLogger(__name__)

CLIENT_SCAN_INTERVAL = 10.0
RATE_SAMPLE_INTERVAL = 1.0


class _GatheredAppends:
    """The remoting server's read scope: the store gathers the appends of a read's requests."""

    __slots__ = ("_store",)

    def __init__(self, store: MessageStore) -> None:
        self._store = store

    def begin_read(self) -> None:
        self._store.begin_gathering()

    def end_read(self) -> None:
        self._store.end_gathering()


class Broker(Service):
    def __init__(
        self,
        config: BrokerConfig,
        store_config: StoreConfig,
        remoting: RemotingConfig | None = None,
        ha_config: HAConfig | None = None,
        controller_config: ControllerConfig | None = None,
        proxy_config: ProxyConfig | None = None,
    ) -> None:
        super().__init__()
        self.controller_config = controller_config or ControllerConfig()
        # Controller mode: every broker starts as a slave; the role it takes when elected.
        self.elected_role = store_config.broker_role
        if self.controller_config.enable_controller_mode:
            store_config = dataclasses.replace(store_config, broker_role=BrokerRole.SLAVE)
        # What the processors read that changes while the broker runs (see broker.state).
        self.state = BrokerState(
            config,
            f"{config.advertised_ip}:{config.listen_port}",
            pack_host("127.0.0.1", config.listen_port),
        )
        self.store_config = store_config
        self.remoting = remoting or RemotingConfig()
        self.ha_config = ha_config or HAConfig()
        self.store = MessageStore(store_config)
        self.store.serve_confirmed_only = self.controller_config.enable_controller_mode
        self.timers = TimerStore(store_config)
        self.timer_metrics = TimerMetrics(store_config.root / "config" / "timermetrics")
        # Timer messages (broker/timer.py): a master's delivers, a slave's fills the wheel only.
        self.timer: TimerMessageService | None = None
        folder = config_dir(store_config.root)
        self.topics = TopicConfigManager(
            folder,
            config,
            schedule_queue_nums=len(self.store.delay_levels),
            on_change=self._on_topic_change,
        )
        self.groups = SubscriptionGroupManager(
            folder, auto_create=config.auto_create_subscription_group
        )
        self.offsets = ConsumerOffsetManager(folder)
        self.delay_offsets = DelayOffsetTable(folder)
        self.consumers = ConsumerManager(
            self._notify_consumer_ids_changed,
            notify_enabled=config.notify_consumer_ids_changed_enable,
        )
        self.producers = ProducerManager()
        self.rebalance_locks = RebalanceLockManager()
        check_interval = (
            5.0 if config.long_polling_enable else config.short_polling_time_mills / 1000
        )
        self.pull_holds = PullRequestHoldService(
            self.store.max_offset_in_queue,
            check_interval,
            max_held=config.pull_thread_pool_queue_capacity,
        )
        self.stats = BrokerStats()
        self.rates = RateSampler(self.stats)
        self.stats_windows = StatsWindows(self.stats)
        self.metrics: MetricsServer | None = None
        self.server = RemotingServer(
            self.remoting.bind_address,
            config.listen_port,
            max_frame_size=self.remoting.max_frame_size,
            idle_timeout=self.remoting.server_channel_max_idle_time_seconds,
            name=f"broker {config.broker_name}",
            tls=self.remoting.server_tls(),
            limits=self.remoting.receive_limits(),
        )
        self.server.gate = NameGate.for_broker()
        # The sends of one read are appended with one system call (MessageStore.begin_gathering).
        self.server.read_scope = _GatheredAppends(self.store)
        # Only with aclEnable: without the hook a request pays nothing for ACL.
        self.acl: PlainAccessValidator | None = None
        self.acl_watcher: AclWatcher | None = None
        if config.acl_enable:
            acl = self.acl = PlainAccessValidator(AclRules())
            self.server.add_hook(acl)
            self.acl_watcher = AclWatcher(
                lambda: acl_paths(config.acl_file, rocketmq_home()),
                acl.use,
            )
        client_tls = self.remoting.client_tls()
        # The broker's own connections (name servers, its master): TLS with tls.enable.
        self.client_tls = client_tls.context() if client_tls is not None else None
        # With aclEnable its own requests are signed (broker/acl/own_account.py).
        acl_rules = self._acl_rules()
        self.signer = OwnAccountSigner(acl_rules) if acl_rules is not None else None
        self.namesrv_client = RemotingClient(
            idle_timeout=0, tls=self.client_tls, signer=self.signer
        )
        self.registration: NameServerRegistration | None = None
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.offset_reconciler: OffsetReconciler | None = None
        self.schedule: ScheduleMessageService | None = None
        self.slave_names: SlaveNames | None = None
        self.ha_members: GroupMembers | None = None
        self.transactions = TransactionalMessageService(
            self.store, self.offsets, lambda: self.store_host
        )
        self.transaction_check: TransactionCheckService | None = None
        # POP consumption (broker/pop): served by a master, revived by the master's task.
        self.pop = PopService(
            lambda: self.config.broker_name,
            lambda: self.config.broker_cluster_name,
            self.store,
            self.topics,
            self.groups,
            self.offsets,
            self.pull_holds,
            lambda: self.store_host,
            revive_queue_num=config.revive_queue_num,
            fifo_path=folder / "popFifo.json",
        )
        self.pop_revive: BackgroundTask | None = None
        if store_config.broker_role is BrokerRole.SLAVE:
            self.ha_client, self.slave_sync = self._slave_parts()
        else:
            self.offset_reconciler = OffsetReconciler(
                self.state, self.offsets, self.client_tls, self.signer
            )
        self.controller: GroupController | None = None
        if self.controller_config.enable_controller_mode:
            self.controller = GroupController(
                self.controller_config,
                config.broker_cluster_name,
                config.broker_name,
                config.broker_id,
                self,
                EpochFile(self.controller_config.epoch_file(store_config.root)),
            )
        self._required_acks: frozenset[int] = frozenset()
        self.last_register_result: RegisterBrokerResult | None = None
        self.register_result_listeners: list[Callable[[RegisterBrokerResult], None]] = []
        self._background: set[asyncio.Task[None]] = set()
        self.proxy_config = proxy_config
        # Controller mode: consumer offsets committed through the CommitLog, so that an
        # acknowledged commit survives a failover (broker/offset_log.py).
        self.offset_log: OffsetLog | None = None
        if self.controller_config.enable_controller_mode:
            self.offset_log = OffsetLog(self.store, self.offsets, lambda: self.store_host)
        self._register_processors()
        # RocketMQ 5's gRPC endpoint (broker/proxy): brokerd passes its keys; a Broker made
        # without them (tests, embedding) serves remoting only.
        self.grpc: GrpcServer | None = None
        if proxy_config is not None:
            if proxy_config.enabled:
                self.grpc = self._grpc_server(proxy_config)
            # GET_BROKER_CONFIG reports the bound port (-1: none): other brokers' routes list
            # this one's queues there.
            self.ops.grpc_port = lambda: self.grpc.port if self.grpc is not None else -1

    def _grpc_server(self, proxy_config: ProxyConfig) -> GrpcServer:
        """The gRPC endpoint, guarded as the remoting port is: with aclEnable every call's
        5.x signature and permissions are checked against the same ACL accounts
        (broker/proxy/auth.py), and with tls.server.mode it serves TLS with the same
        certificate keys."""
        service = MessagingService(
            proxy_config,
            self.state,
            self.topics,
            self.groups,
            self.store,
            self.stats,
            self.transactions,
            self.producers,
            port=lambda: self.grpc.port if self.grpc is not None else 0,
            pop=self.pop,
            recall=RecallService(
                self.store,
                self.topics,
                lambda: self.timer,
                lambda: self.config.broker_name,
                lambda: self.store_host,
            ),
        )
        service.cluster = ClusterRoutes(
            BrokerAPI(self.namesrv_client, timeout=CALL_TIMEOUT_SECONDS),
            lambda: self.config.name_servers,
            service.own_broker,
        )
        acl = self.acl
        guard = GrpcGuard(lambda: acl.rules) if acl is not None else None
        return GrpcServer(
            service,
            self.remoting.bind_address,
            proxy_config.grpc_server_port,
            guard=guard,
            tls=self.remoting.server_tls(),
        )

    def _slave_parts(self) -> tuple[HAClient, SlaveSynchronize]:
        """A slave's replication client and its copier of the master's tables."""
        handshake = None
        if self.controller_config.enable_controller_mode:
            handshake = EpochHandshake(
                self.state.config.broker_id, self._epoch_pairs, self._on_master_epochs
            )
        ha_client = HAClient(
            self.store,
            self.ha_config,
            resync=self._resync,
            connect=ha_connect(self.ha_config, self._acl_rules()),
            handshake=handshake,
        )
        slave_sync = SlaveSynchronize(
            self.state,
            self.topics,
            self.groups,
            self.offsets,
            self.delay_offsets,
            self.ha_config.slave_synchronize_interval,
            tls=self.client_tls,
            signer=self.signer,
            on_timer_checkpoint=self.adopt_master_timers,
            on_timer_metrics=self.timer_metrics.replace,
        )
        return ha_client, slave_sync

    def _acl_rules(self) -> Callable[[], AclRules] | None:
        """With aclEnable, the rules in force now (replication proves an account of them)."""
        acl = self.acl
        if acl is None:
            return None
        return lambda: acl.rules

    # --- identity -------------------------------------------------------------------------

    @property
    def config(self) -> BrokerConfig:
        """The configuration now (UPDATE_BROKER_CONFIG replaces it)."""
        return self.state.config

    @property
    def listen_port(self) -> int:
        return self.server.port

    @property
    def advertised_address(self) -> str:
        return self.state.advertised_address

    @property
    def store_host(self) -> bytes:
        return self.state.store_host

    @property
    def ha_listen_port(self) -> int:
        if self.ha_service is not None:
            return self.ha_service.port
        configured = self.ha_config.ha_listen_port
        if configured >= 0:
            return configured
        return self.listen_port + 1 if self.listen_port else 0

    @property
    def ha_server_address(self) -> str:
        return f"{self.config.ha_ip}:{self.ha_listen_port}"

    @property
    def role(self) -> BrokerRole:
        return self.store.role

    # --- wiring -----------------------------------------------------------------------------

    def _register_processors(self) -> None:
        # Each processor gets the managers and services it uses, never the Broker.
        state, store, topics, groups = self.state, self.store, self.topics, self.groups
        send = SendProcessor(state, topics, store, self.stats, self.transactions)
        end_transaction = EndTransactionProcessor(store, self.transactions)
        pull = PullProcessor(
            state,
            store,
            topics,
            groups,
            self.consumers,
            self.offsets,
            self.pull_holds,
            self.stats,
        )
        query = QueryProcessor(store)
        consumer = ConsumerProcessor(
            state,
            store,
            topics,
            groups,
            self.consumers,
            self.producers,
            self.offsets,
            self.rebalance_locks,
        )
        admin = AdminProcessor(state, store, topics, groups, self.offsets, self.delay_offsets)
        retry = RetryProcessor(state, store, topics, groups)
        ops = self.ops = OpsProcessor(
            state,
            store,
            topics,
            self.offsets,
            self.consumers,
            self.producers,
            self.stats,
            self.rates,
            fixed_configs=(
                self.store_config,
                self.remoting,
                self.ha_config,
                self.controller_config,
                *((self.proxy_config,) if self.proxy_config is not None else ()),
            ),
            listen_ports=lambda: (self.listen_port, self.ha_listen_port),
            request_registration=self.request_full_registration,
            spawn=self.spawn,
        )
        ops.health = self.health
        group_admin = GroupAdminProcessor(
            topics,
            groups,
            self.offsets,
            self.consumers,
            self.stats_windows,
            consume_stats=ops.consume_stats,
            broker_addr=lambda: self.advertised_address,
        )
        pop = PopProcessor(state, self.pop)
        operators5 = Operators5Processor(
            lambda: self.config.broker_name,
            lambda: self.grpc.service.clients if self.grpc is not None else None,
            self.pop,
            self.store,
            self.offsets,
            self.timer_metrics,
        )
        processors = (
            send,
            end_transaction,
            pull,
            pop,
            query,
            consumer,
            admin,
            retry,
            ops,
            group_admin,
            operators5,
        )
        table: dict[int, AtOnceProcessor] = {
            code: handler
            for processor in processors
            for code, handler in handlers(processor).items()
        }
        table[RequestCode.GET_BROKER_HA_STATUS] = self._ha_status
        table[RequestCode.GET_TIMER_CHECK_POINT] = self._timer_check_point
        ops.timer_info = self._timer_info
        if self.controller is not None:
            table[RequestCode.CONTROLLER_ELECT_MASTER] = self._elect_master
        pull.offset_log = consumer.offset_log = ops.offset_log = self.offset_log
        admin.offset_log = group_admin.offset_log = self.offset_log
        for code, processor in table.items():
            self.server.register(code, processor)
        self.server.on_connection_closed.append(self._on_connection_closed)

    def _registration_topics(self) -> TopicConfigSerializeWrapper:
        """The topic table as registered: perms limited by a read- or write-only broker."""
        wrapper = self.topics.wrapper()
        permission = self.config.broker_permission
        for name, topic in list(wrapper.topic_config_table.items()):
            perm = mask_permission(topic.perm, permission)
            if perm != topic.perm:
                wrapper.topic_config_table[name] = dataclasses.replace(topic, perm=perm)
        return wrapper

    def _registration_topic(self, name: str) -> TopicConfig | None:
        """One topic as registered (see `_registration_topics`); None when it is gone."""
        topic = self.topics.select(name)
        if topic is None:
            return None
        perm = mask_permission(topic.perm, self.config.broker_permission)
        return topic if perm == topic.perm else dataclasses.replace(topic, perm=perm)

    def _registration_table(self) -> RegistrationTable:
        return RegistrationTable(
            self._registration_topics,
            self._registration_topic,
            lambda: dataclasses.replace(self.topics.data_version),
            self._registration_json_rows,
            self.topics.json_row,
            self._texts_registered,
        )

    def _texts_registered(self) -> bool:
        """Whether the topics register as their rows' texts (see `_registration_json_rows`)."""
        permission = self.config.broker_permission
        return bool(permission & PERM_READ and permission & PERM_WRITE)

    def _registration_json_rows(self) -> list[tuple[str, str]] | None:
        """The table's JSON rows, as registered: None when the broker's permission limits its
        topics' (`_registration_topics` then changes them)."""
        if not self._texts_registered():
            return None
        return self.topics.json_rows()

    def _on_connection_closed(self, connection: RemotingConnection) -> None:
        self.consumers.do_channel_close_event(connection)
        self.producers.do_channel_close_event(connection)

    def _notify_consumer_ids_changed(self, group: str, channels: list[Channel]) -> None:
        for channel in channels:
            if isinstance(channel, RemotingConnection):
                request = RemotingCommand.request(
                    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}
                )
                self.spawn(channel.oneway(request))

    def _on_topic_change(self, change: TopicConfigChanged) -> None:
        # The manager has persisted it; the name servers must learn of it.
        if self.registration is None:
            return  # the first registration, still to come, sends the whole table
        if change.topic is None:  # the whole table (copied from the master)
            self.registration.request_full()
        else:
            self.registration.note_change(change.topic, change.text)

    def _ensure_system_topic(self, topic: str) -> None:
        """A topic the broker writes itself (TRANS_CHECK_MAX_TIME_TOPIC), one queue, read-write."""
        self.topics.create_in_send_back(topic, 1, PERM_READ_WRITE, 0)

    def request_registration(self) -> None:
        """Register with the name servers soon (once registration has started)."""
        if self.registration is not None:
            self.registration.request_registration()

    def request_full_registration(self) -> None:
        """Send the whole table to every name server soon: what every topic registers as changed
        (the broker's permission)."""
        if self.registration is not None:
            self.registration.request_full()

    def spawn(self, work: Awaitable[None]) -> None:
        """Run `work` in the background; connection failures are only logged (debug)."""

        async def run() -> None:
            try:
                await work
            except (ConnectionError, TimeoutError) as exc:
                log.debug("background send failed: %s", exc)

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _ha_status(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        del connection
        info = self.ha_runtime_info()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, None, body=dumps(info))

    async def _timer_check_point(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """GET_TIMER_CHECK_POINT (60): the timer checkpoint, what a slave's wheel follows."""
        del connection
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, None, body=self.timers.progress().encode()
        )

    def _timer_info(self) -> dict[str, str]:
        timer = self.timer
        if timer is not None:
            return timer.runtime_info()
        return {"timerCongestNum": str(self.timers.pending)}

    def adopt_master_timers(self, progress: TimerProgress) -> None:
        """A slave: the master's timer checkpoint (broker/slave_sync.py). Its cursor is the
        master's as it is, even behind the slave's own (a fresh slave's is its start time): a
        timer the master has not delivered must not be skipped."""
        timers = self.timers
        if progress.last_read_time_ms > 0:
            timers.cursor = progress.last_read_time_ms
        timers.master_queue_offset = progress.queue_offset

    async def _start_timer(self, *, deliver: bool) -> None:
        """The timer service of this role (a previous one stops first)."""
        if self.timer is not None:
            await self.timer.stop()
        self.timer = await self.start_child(
            TimerMessageService(
                self.store,
                self.timers,
                lambda: self.store_host,
                deliver=deliver,
                flush_interval_ms=self.store_config.timer_flush_interval_ms,
                metrics=self.timer_metrics,
            )
        )

    async def _elect_master(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand:
        """electMaster (RocketMQ 5's CONTROLLER_ELECT_MASTER, here sent to the group's master):
        hand the group over to the broker of `brokerId`."""
        del connection
        assert self.controller is not None
        text = request.ext_fields.get("brokerId", "")
        if not text.strip().isdigit():
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, f"brokerId: {text!r} is not a broker id"
            )
        refused = await self.controller.hand_over(int(text))
        if refused:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, refused)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, None)

    def health(self) -> Health:
        """What GET /health answers and the runtime info's brokerHealth (broker/health.py)."""
        ha = self.ha_service
        schedule = self.schedule
        return check_health(
            self.store,
            sync_master=ha.transfer if ha is not None else None,
            undeliverable=schedule.undeliverable if schedule is not None else 0,
        )

    def ha_runtime_info(self) -> dict[str, object]:
        info: dict[str, object] = {}
        if self.ha_service is not None:
            info = self.ha_service.runtime_info()
            connections = info.get("haConnectionInfo")
            if self.slave_names is not None and isinstance(connections, list):
                # tidemq: which slave each connection is (broker/slave_names.py).
                for connection in connections:
                    named = self.slave_names.lookup(str(connection.get("addr")))
                    if named is not None:
                        connection["slaveBrokerAddr"], connection["slaveBrokerId"] = named
        elif self.ha_client is not None:
            info = self.ha_client.runtime_info()
        if self.controller is not None:
            info["controller"] = self.controller.runtime_info()
        return info

    def _resync(self, state: ClientState, local: int, master: int) -> bool:
        """A slave told to resynchronise (haSlaveAutoTruncate / haSlaveAutoResync)."""
        del local
        if state is ClientState.DIVERGED:
            self.store.truncate_for_resync(master)
            return True
        if state is ClientState.BEHIND_RETENTION:
            self.store.reset_for_resync()
            return True
        return False

    def _on_register_result(self, result: RegisterBrokerResult) -> None:
        self.last_register_result = result
        # In controller mode the master is the one etcd names (GroupMember.follow).
        if self.ha_client is not None and self.controller is None:
            self.ha_client.update_master_address(result.ha_server_addr)
        if self.slave_sync is not None and self.controller is None:
            self.slave_sync.set_master_address(result.master_addr)
        for listener in self.register_result_listeners:
            listener(result)

    # --- life cycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        """Start the children in the order of the module docstring; each stops in reverse."""
        started = time.monotonic()
        self.store.load()
        for manager in self._managers():
            manager.load()
        if self.store.role is not BrokerRole.SLAVE:
            # a slave's offsets come from its master, whose queues may be ahead of its own
            self.offsets.correct_past_end(self.store.max_offset_in_queue)
        if self.offset_log is not None:
            # The commits of records past the persisted applied position (a restart).
            self.offset_log.apply_available()
            self.store.add_arrival_listener(self.offset_log.on_arrival)
        await self.start_child(Step(stop=self.namesrv_client.close))
        await self.start_child(self.store)
        queue = self.store.find_consume_queue(TIMER_TOPIC, 0)
        self.timer_metrics.load()
        self.timers.load(
            int(time.time() * 1000),
            queue.min_offset if queue is not None else 0,
            queue.max_offset if queue is not None else 0,
        )
        await self.start_child(Step(stop=self.timers.close))
        await self.start_child(Step(stop=self._persist_managers))
        if self.acl_watcher is not None:  # the rules are loaded before the first request
            await self.start_child(self.acl_watcher)
        await self.start_child(self.server)
        self.state.advertised_address = f"{self.config.advertised_ip}:{self.listen_port}"
        self.state.store_host = pack_host(self.config.advertised_ip, self.listen_port)
        if self.grpc is not None:
            await self.start_child(self.grpc)
        if self.ha_client is not None:
            await self.start_child(self.ha_client)
            await self._start_timer(deliver=False)
        else:
            await self._start_master_ha()
        self.store.add_arrival_listener(self.pull_holds.notify_arrival)
        await self.start_child(self.pull_holds)
        identity = BrokerIdentity(
            self.config.broker_cluster_name,
            self.config.broker_name,
            self.config.broker_id,
            self.advertised_address,
            self.ha_server_address,
        )
        # Known before it starts: a topic made during the first registration asks for another.
        self.registration = NameServerRegistration(
            identity,
            self.config.name_servers,
            self.namesrv_client,
            self._registration_table(),
            period_ms=self.config.register_name_server_period,
            timeout_ms=self.config.register_broker_timeout_mills,
            shape=RegistrationShape(
                split=self.config.enable_split_registration,
                split_size=self.config.split_registration_size,
                compressed=self.config.compressed_register,
            ),
            on_result=self._on_register_result,
        )
        await self.start_child(self.registration)
        if self.slave_sync is not None:
            await self.start_child(self.slave_sync)
        if self.offset_reconciler is not None:
            reconciler = self.offset_reconciler
            await self.start_child(Step(start=reconciler.request, stop=reconciler.stop))
        if self.controller is not None:
            await self.start_child(self.controller)
        for run, name in (
            (self._persist_offsets_periodically, "persist-offsets"),
            (self._scan_clients_periodically, "scan-clients"),
            (self._sample_rates_periodically, "sample-rates"),
            (self._renew_grpc_receipts_periodically, "grpc-renewal"),
        ):
            await self.start_child(BackgroundTask(run, name))
        await self.start_child(Step(stop=self._stop_serving))
        if self.config.metrics_port >= 0:
            collector = BrokerCollector(
                self.state,
                self.store,
                self.topics,
                self.offsets,
                self.consumers,
                self.stats,
                self.rates,
                producers=self.producers,
                pull_holds=self.pull_holds,
                ha_runtime_info=self.ha_runtime_info,
                runtime_info=self.ops.runtime_info,
                health=self.health,
            )
            self.metrics = await self.start_child(
                MetricsServer(
                    registry_for(collector),
                    self.remoting.bind_address,
                    self.config.metrics_port,
                    health=lambda: self.health().http(),
                )
            )
        log.info(
            "broker %s (id %d, %s) boot success at %s in %.2f s",
            self.config.broker_name,
            self.config.broker_id,
            self.role.value,
            self.advertised_address,
            time.monotonic() - started,
        )

    async def _start_master_ha(self) -> None:
        """The master's HA port, replication attached to the store, the delayed-message
        schedule, the transaction checks and the slaves' names: at start, or when controller
        mode elects this broker."""
        all_ack = self.controller is not None and self.controller_config.all_ack_in_sync_state_set
        # Who may replicate (broker/ha_guard.py): stopped after the HA port that asks it.
        members = self.ha_members = GroupMembers(
            self.state, self.ha_config.ha_admission_timeout, self.client_tls, self.signer
        )
        await self.start_child(Step(stop=members.stop))
        if not self.config.name_servers and not self.ha_config.allowed_slave_networks:
            log.warning(
                "HA: no namesrvAddr to learn this group's slaves from and no "
                "haAllowedSlaveAddresses: the HA port admits no one"
            )
        proof = master_proof(self.ha_config, self._acl_rules())
        ha_service = self.ha_service = await self.start_child(
            HAService(
                self.store,
                self.ha_config,
                self.remoting.bind_address,
                self.ha_listen_port,
                listen=ha_listen(self.ha_config, members, proof),
                all_ack_in_sync=all_ack,
                epochs=self._epoch_pairs if self.controller is not None else None,
            )
        )
        ha_service.require_acks_from(self._required_acks)
        await self.start_child(
            Step(
                start=lambda: self.store.attach_replication(ha_service.replication()),
                stop=self.store.detach_replication,
            )
        )
        self.schedule = await self.start_child(
            ScheduleMessageService(self.store, self.delay_offsets, lambda: self.store_host)
        )
        await self._start_timer(deliver=True)
        self.transaction_check = await self.start_child(
            TransactionCheckService(
                self.state, self.transactions, self.producers, self._ensure_system_topic
            )
        )
        self.pop_revive = await self.start_child(self.pop.revive_task())
        if self.offset_reconciler is not None:
            reconciler = self.offset_reconciler
            ha_service.slave_listeners.append(lambda _address: reconciler.request())
        names = self.slave_names = SlaveNames(
            self.state,
            lambda: [c.address for c in ha_service.connections],
            self.client_tls,
            self.signer,
        )
        await self.start_child(Step(stop=names.stop))
        ha_service.slave_listeners.append(lambda _address: names.request())

    # --- controller mode (broker/failover.py's GroupMember) ----------------------------------

    def _epoch_pairs(self) -> list[tuple[int, int]]:
        """The epoch file as the HA handshake carries it."""
        if self.controller is None:
            return []
        return [(e.epoch, e.start_offset) for e in self.controller.epochs.entries]

    def _on_master_epochs(self, entries: list[tuple[int, int]]) -> None:
        """The HA handshake told this slave its master's epochs (before any byte is sent): a
        log that left the master's history is cut there, the cut bytes kept in `.diverged`
        files (the controller did so already when it switched masters; this catches what
        arrived since), and the master's epochs go into the epoch file."""
        if self.controller is None:
            return
        epochs = self.controller.epochs
        masters = [EpochEntry(e, o) for e, o in entries]
        cut = divergence_point(epochs.entries, masters)
        if cut is not None and self.store.max_phy_offset > cut:
            log.warning(
                "HA epoch handshake: this log left the master's history at %d; the bytes "
                "after it go to .diverged files",
                cut,
            )
            self.store.truncate_for_resync(cut)
            epochs.truncate_after(cut - 1 if cut > 0 else 0)
        for entry in masters:
            if entry.epoch > epochs.last_epoch:
                epochs.append(entry.epoch, entry.start_offset)

    @property
    def broker_addr(self) -> str:
        return self.advertised_address

    @property
    def ha_addr(self) -> str:
        return self.ha_server_address

    @property
    def max_offset(self) -> int:
        return self.store.max_phy_offset

    @property
    def ha_client_addr(self) -> str:
        return self.ha_client.local_address if self.ha_client is not None else ""

    def set_lease_deadline(self, deadline: float | None, reason: str) -> None:
        self.store.lease_deadline = deadline
        if reason:
            self.store.fence_reason = reason

    async def switch_master(self, master_addr: str, master_ha_addr: str, cut: int | None) -> None:
        """Replicate from a new master: the session with the old one ends first (a deposed
        master may still be sending), the log is cut at `cut` when given (the tail kept in
        `.diverged` files), then replication starts from the new master."""
        if self.ha_client is not None:
            await self.ha_client.stop()
            if cut is not None:
                self.store.truncate_for_resync(cut)
            if self.store.serve_confirmed_only:
                # A candidate that lost dispatched its whole log: back to what was confirmed.
                self.store.withdraw_unconfirmed(self.ha_client.confirmed_offset)
            self.ha_client.update_master_address(master_ha_addr)
            await self.ha_client.start()
        if self.slave_sync is not None:
            self.slave_sync.set_master_address(master_addr)

    async def stop_replication(self) -> int:
        if self.ha_client is not None:
            await self.ha_client.stop()
        return self.store.cut_incomplete_tail()

    async def resume_replication(self) -> None:
        if self.ha_client is not None:
            if self.store.serve_confirmed_only:
                self.store.withdraw_unconfirmed(self.ha_client.confirmed_offset)
            await self.ha_client.start()

    async def promote(self, epoch: int) -> None:
        """Elected: the store takes writes, the HA port opens, the slave's parts stop, and the
        broker registers as its group's master (brokerId 0) with its epoch, at once."""
        if self.offset_log is not None:
            # Every commit its log holds, before it answers a query as master.
            self.offset_log.apply_available()
        self.store.take_role(self.elected_role)
        if self.slave_sync is not None:
            await self.slave_sync.stop()
            self.slave_sync = None
        self.ha_client = None
        await self._start_master_ha()
        if self.registration is not None:
            self.registration.change_identity(
                dataclasses.replace(self.registration.identity, broker_id=0, master_epoch=epoch)
            )
        log.info(
            "broker %s is now %s (epoch %d)",
            self.config.broker_name,
            self.elected_role.value,
            epoch,
        )

    async def demote(self) -> None:
        """Deposed: this master's writes stay refused while its master parts stop (schedule,
        transaction checks, replication, the HA port, slave names); then the store is a slave's,
        the broker registers under its own brokerId again and a replication client waits for
        the master to follow."""
        self.store.lease_deadline = 0.0
        self.store.checkpoint.note_confirmed()  # its own confirmed offset, for the slave's cap
        for part in (
            self.schedule,
            self.timer,
            self.transaction_check,
            self.pop_revive,
            self.ha_service,
        ):
            if part is not None:
                if part is self.ha_service:
                    self.store.detach_replication()
                await part.stop()
        if self.slave_names is not None:
            await self.slave_names.stop()
        if self.ha_members is not None:
            await self.ha_members.stop()
        self.ha_members = None
        self.schedule = None
        self.transaction_check = None
        self.pop_revive = None
        self.pop.ledgers.clear()  # a promotion reads the revive queues again
        self.slave_names = None
        self.ha_service = None
        self.store.take_role(BrokerRole.SLAVE)
        self.store.lease_deadline = None
        self.ha_client, self.slave_sync = self._slave_parts()
        await self.start_child(self.ha_client)
        await self.start_child(self.slave_sync)
        await self._start_timer(deliver=False)
        if self.registration is not None:
            self.registration.change_identity(
                dataclasses.replace(
                    self.registration.identity,
                    broker_id=self.config.broker_id,
                    master_epoch=None,
                )
            )
        log.warning("broker %s is a slave again", self.config.broker_name)

    def identify_slaves(self, addresses: dict[str, int]) -> None:
        if self.ha_members is not None:
            # etcd's members are the group's too: their HA port admits them.
            self.ha_members.learn(list(addresses))
        if self.ha_service is not None:
            self.ha_service.identify(addresses)

    def caught_up_times(self) -> dict[int, float]:
        if self.ha_service is None:
            return {}
        return {
            c.broker_id: c.caught_up_at
            for c in self.ha_service.connections
            if c.broker_id is not None and c.caught_up_at > 0
        }

    def set_in_sync_replicas(self, count: int) -> None:
        self.store.in_sync_replicas = count
        self.store.min_in_sync_replicas = self.controller_config.min_in_sync_replicas

    def require_acks_from(self, broker_ids: frozenset[int]) -> None:
        self._required_acks = broker_ids
        if self.ha_service is not None:
            self.ha_service.require_acks_from(broker_ids)

    def _managers(self) -> tuple[ConfigManager[Any], ...]:
        return (self.topics, self.groups, self.offsets, self.delay_offsets)

    def _persist_managers(self) -> None:
        self._save_fifo()
        for manager in self._managers():
            manager.persist_quietly()
            if self.config.export_config_json_on_shutdown:
                manager.export_quietly()
            manager.close()

    def _save_fifo(self) -> None:
        try:
            self.pop.save_fifo()
        except OSError as exc:
            log.error("cannot persist the FIFO groups' deliveries: %s", exc)

    async def _stop_serving(self) -> None:
        """Right after metrics, ahead of the reverse order (their own stops later find nothing
        to do): held pulls answer now, with whatever they find, instead of holding up the stop;
        the server stops accepting and lets requests in flight finish; delayed delivery and
        replication end before the broker unregisters, as in RocketMQ's shutdown (the store lets
        go of HA before HA stops)."""
        for part in (
            self.pull_holds,
            self.server,
            self.grpc,
            self.schedule,
            self.timer,
            self.transaction_check,
            self.pop_revive,
        ):
            if part is not None:
                await part.stop()
        if self.ha_service is not None:
            self.store.detach_replication()
            await self.ha_service.stop()
        if self.ha_client is not None:
            await self.ha_client.stop()

    async def _persist_offsets_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_consumer_offset_interval / 1000)
            self._save_fifo()
            for manager in (self.offsets, self.delay_offsets):
                # Encode the changed rows on the loop (a consistent view), write them off it.
                changes = manager.take_changes()
                if not changes:
                    continue
                try:
                    await asyncio.to_thread(manager.store.write, manager.table_name, changes)
                except OSError as exc:
                    manager.restore_changes(changes)
                    log.error("cannot persist %s: %s", manager.table_name, exc)

    async def _renew_grpc_receipts_periodically(self) -> None:
        """Push consumers' messages kept invisible while they are consumed
        (broker/proxy/renewal.py)."""
        grpc = self.grpc
        if grpc is None:
            return
        while True:
            await asyncio.sleep(grpc.service.config.renew_schedule_period_millis / 1000)
            await grpc.service.renew_due()

    async def _sample_rates_periodically(self) -> None:
        while True:
            await asyncio.sleep(RATE_SAMPLE_INTERVAL)
            self.rates.sample()
            self.stats_windows.sample()

    async def _scan_clients_periodically(self) -> None:
        while True:
            await asyncio.sleep(CLIENT_SCAN_INTERVAL)
            expiry = self.config.channel_expired_timeout
            for expired in self.consumers.scan_not_active(
                expiry_ms=expiry
            ) + self.producers.scan_not_active(expiry_ms=expiry):
                channel = expired.info.channel
                if isinstance(channel, RemotingConnection):
                    channel.close()
            if self.grpc is not None:
                self.grpc.service.expire(expiry / 1000)

    async def stop(self) -> None:
        if not self.running:
            return
        log.info("broker %s shutting down", self.config.broker_name)
        await super().stop()
        log.info("broker %s stopped", self.config.broker_name)
