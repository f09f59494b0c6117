"""The MessagingService's answers, one method per RPC, on this broker's store and managers.

Each method takes the decoded request and the call's `CallContext` (the client's metadata) and
returns the response message, or raises `Rejected`, which the server turns into the response's
status (broker/proxy/server.py). No gRPC object reaches this module, so it is tested without a
server. RPCs that are not served yet are listed in `NOT_SERVED` and answer NOT_IMPLEMENTED.

Resources: a `resource_namespace` is RocketMQ's namespace, stored as `<namespace>%<name>`
(NamespaceUtil's form); topic and group names pass the name gate's rules
(client/protocol/names.py) and are refused with ILLEGAL_TOPIC / ILLEGAL_CONSUMER_GROUP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final

from google.protobuf.duration_pb2 import Duration

from tidemq.broker.managers.clients import ClientChannelInfo, ProducerManager
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import TopicConfigManager, is_not_allowed_send_topic
from tidemq.broker.pop.service import PopRefused, PopService, Refusal
from tidemq.broker.processors.ops import mask_permission
from tidemq.broker.processors.send import peer_born_host, with_cluster
from tidemq.broker.property_filter import property_filter
from tidemq.broker.proxy import routes
from tidemq.broker.proxy.clients import GrpcClient, GrpcClients
from tidemq.broker.proxy.cluster_routes import ClusterRoutes
from tidemq.broker.proxy.config import ProxyConfig
from tidemq.broker.proxy.messages import Limits, Outgoing, from_store, to_store
from tidemq.broker.proxy.protocol.definition_pb2 import (
    Broker,
    ClientType,
    Code,
    CustomizedBackoff,
    ExponentialBackoff,
    FilterType,
    Metric,
    Resource,
    RetryPolicy,
    Settings,
    Status,
    TransactionResolution,
    TransactionSource,
)
from tidemq.broker.proxy.protocol.service_pb2 import (
    AckMessageRequest,
    AckMessageResponse,
    AckMessageResultEntry,
    ChangeInvisibleDurationRequest,
    ChangeInvisibleDurationResponse,
    EndTransactionRequest,
    EndTransactionResponse,
    ForwardMessageToDeadLetterQueueRequest,
    ForwardMessageToDeadLetterQueueResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    NotifyClientTerminationRequest,
    NotifyClientTerminationResponse,
    QueryAssignmentRequest,
    QueryAssignmentResponse,
    QueryRouteRequest,
    QueryRouteResponse,
    RecallMessageRequest,
    RecallMessageResponse,
    ReceiveMessageRequest,
    ReceiveMessageResponse,
    SendMessageRequest,
    SendMessageResponse,
    SendResultEntry,
    TelemetryCommand,
)
from tidemq.broker.proxy.renewal import Renewals, Renewed, renew_step_ms
from tidemq.broker.proxy.status import Rejected, ok, put_status_code
from tidemq.broker.recall import RecallRefusal, RecallRefused, RecallService
from tidemq.broker.state import BrokerState
from tidemq.broker.stats import BrokerStats
from tidemq.broker.transaction.messages import HALF_TOPIC, park_half
from tidemq.broker.transaction.service import TransactionalMessageService
from tidemq.client.protocol.headers import EndTransactionRequestHeader
from tidemq.client.protocol.models import PERM_READ, PERM_WRITE, TopicConfig
from tidemq.client.protocol.names import NameKind, name_problem
from tidemq.client.remoting.codes import ResponseCode
from tidemq.common.errors import TideMQError
from tidemq.store.commitlog import PutStatus
from tidemq.store.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE
from tidemq.store.message_store import MessageStore
from tidemq.store.record import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    MessageToStore,
    decode_message_id,
    decode_properties,
    encode_properties,
)
from tidemq.store.tags import MATCH_ALL, parse_tag_expression
from tidemq.store.timer_message import TIMER_TOPIC

log = logging.getLogger(__name__)

# The RPCs of service.proto this endpoint does not serve yet: each answers NOT_IMPLEMENTED.
NOT_SERVED: Final = (
    "PullMessage",
    "UpdateOffset",
    "GetOffset",
    "QueryOffset",
    "SyncLiteSubscription",
)
CONSUMER_TYPES: Final = frozenset(
    {
        ClientType.PUSH_CONSUMER,
        ClientType.SIMPLE_CONSUMER,
        ClientType.PULL_CONSUMER,
        ClientType.LITE_PUSH_CONSUMER,
        ClientType.LITE_SIMPLE_CONSUMER,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class CallContext:
    """What a call's metadata says about its client (the x-mq-* headers) and where it is."""

    client_id: str
    peer: str  # host:port
    language: str = ""
    version: str = ""

    def require_client_id(self) -> str:
        if not self.client_id:
            raise Rejected(Code.CLIENT_ID_REQUIRED, "the x-mq-client-id header is missing")
        return self.client_id


def resource_name(resource: Resource, kind: NameKind) -> str:
    """The stored name of `resource` (namespace-qualified), checked against `kind`'s rules."""
    name = resource.name
    if resource.resource_namespace:
        name = f"{resource.resource_namespace}%{name}"
    problem = name_problem(kind, name)
    if problem is not None:
        code = Code.ILLEGAL_TOPIC if kind is NameKind.TOPIC else Code.ILLEGAL_CONSUMER_GROUP
        raise Rejected(code, f"{kind.value} {name!r}: {problem}")
    return name


class MessagingService:
    def __init__(
        self,
        config: ProxyConfig,
        state: BrokerState,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        store: MessageStore,
        stats: BrokerStats,
        transactions: TransactionalMessageService,
        producers: ProducerManager,
        port: Callable[[], int],
        cluster: ClusterRoutes | None = None,
        pop: PopService | None = None,
        recall: RecallService | None = None,
    ) -> None:
        """`cluster`: the queues of other brokers (name servers); without it QueryRoute
        answers this broker's own."""
        self.config = config
        self.state = state
        self.topics = topics
        self.groups = groups
        self.store = store
        self.stats = stats
        self.transactions = transactions
        self.producers = producers
        self.clients = GrpcClients(max_clients=config.grpc_server_max_clients)
        self._port = port
        self.cluster = cluster
        self.pop = pop  # POP consumption (ReceiveMessage and the acks); None: not served
        self.recall = recall  # RecallMessage and the recall handles; None: not served
        self.renewals = Renewals()  # push consumers' messages (broker/proxy/renewal.py)
        self._returns: set[asyncio.Task[None]] = set()
        self.limits = Limits(
            store.config.max_message_size,
            tuple(store.delay_levels),
            store.config.timer_max_delay_sec * 1000 if store.config.timer_wheel_enable else None,
        )

    # --- routes -------------------------------------------------------------------------

    def _broker(self) -> Broker:
        config = self.state.config
        return Broker(
            name=config.broker_name,
            id=config.broker_id,
            endpoints=routes.endpoints(config.advertised_ip, self._port()),
        )

    def _topic(self, resource: Resource) -> tuple[str, TopicConfig, int]:
        """The topic's stored name, config and permission here, or TOPIC_NOT_FOUND."""
        name = resource_name(resource, NameKind.TOPIC)
        config = self.topics.select(name)
        if config is None:
            raise Rejected(Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist on this broker")
        return name, config, mask_permission(config.perm, self.state.config.broker_permission)

    def own_broker(self) -> Broker:
        """This broker as routes name it: name, id, gRPC endpoint."""
        return self._broker()

    async def query_route(
        self, request: QueryRouteRequest, call: CallContext
    ) -> QueryRouteResponse:
        """Every master's queues of the topic (the name servers' route), else this broker's."""
        del call
        name = resource_name(request.topic, NameKind.TOPIC)
        if self.cluster is not None:
            found = await self.cluster.queues(request.topic, name)
            if found:
                return QueryRouteResponse(status=ok(), message_queues=found)
        _name, config, perm = self._topic(request.topic)
        queues = routes.message_queues(request.topic, config, perm, self._broker())
        return QueryRouteResponse(status=ok(), message_queues=queues)

    async def query_assignment(
        self, request: QueryAssignmentRequest, call: CallContext
    ) -> QueryAssignmentResponse:
        del call
        group = self.groups.get(resource_name(request.group, NameKind.CONSUMER_GROUP))
        _name, config, perm = self._topic(request.topic)
        fifo = group is not None and group.consume_message_orderly
        found = routes.assignments(request.topic, config, perm, self._broker(), fifo=fifo)
        if not found:
            raise Rejected(Code.FORBIDDEN, "no readable queue")
        return QueryAssignmentResponse(status=ok(), assignments=found)

    # --- clients ------------------------------------------------------------------------

    async def heartbeat(self, request: HeartbeatRequest, call: CallContext) -> HeartbeatResponse:
        client_id = call.require_client_id()
        group = ""
        if request.client_type in CONSUMER_TYPES or request.HasField("group"):
            group = resource_name(request.group, NameKind.CONSUMER_GROUP)
        client = self.clients.touch(client_id, call.peer, call.language, call.version)
        if request.client_type != ClientType.CLIENT_TYPE_UNSPECIFIED:
            client.client_type = request.client_type
        client.group = group or client.group
        self._register_producer(client, client.producer_groups)
        return HeartbeatResponse(status=ok())

    async def notify_client_termination(
        self, request: NotifyClientTerminationRequest, call: CallContext
    ) -> NotifyClientTerminationResponse:
        client_id = call.require_client_id()
        if request.HasField("group"):
            resource_name(request.group, NameKind.CONSUMER_GROUP)
        client = self.clients.forget(client_id)
        if client is not None:
            self.unregister(client)
        else:  # never heartbeated, or expired already: its renewals end all the same
            self._release_renewals(client_id)
        return NotifyClientTerminationResponse(status=ok())

    def _register_producer(self, client: GrpcClient, groups: tuple[str, ...]) -> None:
        """Register (or refresh) `client` in the ProducerManager under `groups`, and leave the
        groups it no longer publishes to."""
        for group in set(client.producer_groups) - set(groups):
            self.producers.unregister_producer(group, client.channel)
        client.producer_groups = groups
        for group in groups:
            info = ClientChannelInfo(client.channel, client.client_id, client.language or "JAVA")
            self.producers.register_producer(group, info)

    def unregister(self, client: GrpcClient) -> None:
        """`client` is gone (termination, or no heartbeat for channelExpiredTimeout): its
        producer registrations end, its messages in renewal are made visible again soon."""
        self.producers.do_channel_close_event(client.channel)
        client.producer_groups = ()
        self._release_renewals(client.client_id)

    def _release_renewals(self, client_id: str) -> None:
        gone = self.renewals.forget_client(client_id)
        if gone and self.pop is not None:
            task = asyncio.get_running_loop().create_task(self._return(gone))
            self._returns.add(task)
            task.add_done_callback(self._returns.discard)

    async def _return(self, gone: list[tuple[str, Renewed]]) -> None:
        assert self.pop is not None
        invisible = self.config.invisible_time_millis_when_clear
        for group, renewed in gone:
            try:
                await self.pop.change_invisible(group, renewed.topic, renewed.handle, invisible)
            except PopRefused:
                pass  # acknowledged or visible already
            except Exception:
                log.exception("returning a gone push consumer's message")

    def expire(self, idle_seconds: float) -> None:
        for client in self.clients.expire(idle_seconds):
            self.unregister(client)

    def telemetry(self, command: TelemetryCommand, call: CallContext) -> TelemetryCommand | None:
        """The answer to one command of a client's Telemetry stream (None: no answer).

        Settings are answered with the settings the client must use (RocketMQ 5's
        GrpcClientSettingsManager): for a producer its retry policy and the largest body, for a
        consumer the batch size, long-polling timeout and retry policy of its group.
        """
        client_id = call.require_client_id()
        kind = command.WhichOneof("command")
        if kind == "settings":
            settings = self._answer_settings(command.settings, client_id, call)
            return TelemetryCommand(status=ok(), settings=settings)
        if kind in ("thread_stack_trace", "verify_message_result"):
            return None  # answers to commands this endpoint never sends yet
        raise Rejected(Code.BAD_REQUEST, f"telemetry command {kind or 'none'} is not a client's")

    def _answer_settings(self, given: Settings, client_id: str, call: CallContext) -> Settings:
        if given.client_type == ClientType.CLIENT_TYPE_UNSPECIFIED:
            raise Rejected(Code.UNRECOGNIZED_CLIENT_TYPE, "settings name no client type")
        client = self.clients.touch(client_id, call.peer, call.language, call.version)
        client.client_type = given.client_type
        settings = Settings()
        settings.CopyFrom(given)
        if given.HasField("subscription"):
            client.group = resource_name(given.subscription.group, NameKind.CONSUMER_GROUP)
            self._consumer_settings(settings, client.group)
        else:
            self._producer_settings(settings)
            topics = tuple(resource_name(t, NameKind.TOPIC) for t in given.publishing.topics)
            self._register_producer(client, topics)
        settings.metric.CopyFrom(Metric(on=False))
        client.settings = settings
        return settings

    def _producer_settings(self, settings: Settings) -> None:
        config = self.config
        settings.backoff_policy.CopyFrom(
            RetryPolicy(
                max_attempts=config.grpc_client_producer_max_attempts,
                exponential_backoff=ExponentialBackoff(
                    initial=_duration_ms(config.grpc_client_producer_backoff_initial_millis),
                    max=_duration_ms(config.grpc_client_producer_backoff_max_millis),
                    multiplier=config.grpc_client_producer_backoff_multiplier,
                ),
            )
        )
        settings.publishing.validate_message_type = True
        settings.publishing.max_body_size = self.limits.max_body_size

    def _consumer_settings(self, settings: Settings, group: str) -> None:
        config = self.config
        subscription = settings.subscription
        subscription.receive_batch_size = config.grpc_client_consumer_long_polling_batch_size
        subscription.long_polling_timeout.CopyFrom(
            _duration_ms(config.grpc_client_consumer_max_long_polling_timeout_millis)
        )
        group_config = self.groups.get(group)
        subscription.fifo = group_config is not None and group_config.consume_message_orderly
        retries = group_config.retry_max_times if group_config is not None else 16
        # The redelivery delays of a 4.x retry: level 3 (10 s) on, as CONSUMER_SEND_MSG_BACK.
        delays = [_duration_ms(ms) for ms in self.limits.delay_levels[2:]]
        settings.backoff_policy.CopyFrom(
            RetryPolicy(max_attempts=retries + 1, customized_backoff=CustomizedBackoff(next=delays))
        )

    # --- sending ------------------------------------------------------------------------

    async def send_message(
        self, request: SendMessageRequest, call: CallContext
    ) -> SendMessageResponse:
        if not request.messages:
            raise Rejected(Code.BAD_REQUEST, "no message to send")
        first = request.messages[0].topic
        if any(m.topic != first for m in request.messages):
            raise Rejected(
                Code.MESSAGE_CORRUPTED, "the messages of one request name different topics"
            )
        if not self.state.config.broker_permission & PERM_WRITE:
            raise Rejected(
                Code.FORBIDDEN, f"the broker[{self.state.advertised_address}] refuses writes"
            )
        topic, config, perm = self._topic(first)
        if is_not_allowed_send_topic(topic) or not perm & PERM_WRITE:
            raise Rejected(Code.FORBIDDEN, f"sending message to topic[{topic}] is forbidden")
        now_ms = int(time.time() * 1000)
        outgoing = [to_store(message, self.limits, now_ms) for message in request.messages]
        entries = [await self._put(topic, config, one, call) for one in outgoing]
        return SendMessageResponse(status=_overall(entries), entries=entries)

    async def _put(
        self, topic: str, config: TopicConfig, outgoing: Outgoing, call: CallContext
    ) -> SendResultEntry:
        queue_id = choose_queue(config.write_queue_nums, outgoing.message_group)
        properties = with_cluster(
            encode_properties(outgoing.properties), self.state.config.broker_cluster_name
        )
        message = MessageToStore(
            topic,
            queue_id,
            outgoing.body,
            properties,
            0,
            0,
            outgoing.born_timestamp,
            peer_born_host(call.peer),
            self.state.store_host,
            0,
        )
        if outgoing.transactional:
            park_half(message)  # in the half queue until EndTransaction (or the check)
            result = await self.store.put_message(message, self.transactions.on_prepared)
        else:
            result = await self.store.put_message(message)
        append = result.append
        if result.status is not PutStatus.PUT_OK or append is None:
            code = put_status_code(result.status)
            remark = result.remark or f"send message failed, sendStatus={result.status.value}"
            return SendResultEntry(status=Rejected(code, remark).status())
        self.stats.on_put(topic, append.msg_num, append.wrote_bytes)
        recall_handle = ""
        if message.topic == TIMER_TOPIC and self.recall is not None:  # parked by the store
            recall_handle = self.recall.handle_of(topic, decode_properties(message.properties))
        return SendResultEntry(
            status=ok(),
            message_id=outgoing.message_id,
            offset=append.queue_offset,
            # The half message's offsetMsgId: EndTransaction finds it by its CommitLog offset.
            transaction_id=append.msg_id if outgoing.transactional else "",
            recall_handle=recall_handle,
        )

    async def recall_message(
        self, request: RecallMessageRequest, call: CallContext
    ) -> RecallMessageResponse:
        """Cancel a timer message by the recall handle SendMessage answered (broker/recall.py)."""
        if self.recall is None:
            raise Rejected(Code.NOT_IMPLEMENTED, "RecallMessage is not served by this broker")
        topic = resource_name(request.topic, NameKind.TOPIC)
        try:
            message_id = await self.recall.recall(
                topic, request.recall_handle, peer_born_host(call.peer)
            )
        except RecallRefused as refused:
            if refused.kind is RecallRefusal.STORE and refused.status is not None:
                raise Rejected(put_status_code(refused.status), refused.reason) from None
            raise Rejected(_RECALL_REFUSAL_CODES[refused.kind], refused.reason) from None
        return RecallMessageResponse(status=ok(), message_id=message_id)

    # --- transactions -------------------------------------------------------------------

    async def end_transaction(
        self, request: EndTransactionRequest, call: CallContext
    ) -> EndTransactionResponse:
        """Commit or roll back the half message `transaction_id` names (the offsetMsgId
        SendMessage answered), through the broker's transaction service."""
        del call
        topic = resource_name(request.topic, NameKind.TOPIC)
        resolution = _END_STATES.get(request.resolution)
        if resolution is None:
            raise Rejected(Code.BAD_REQUEST, "resolution is neither COMMIT nor ROLLBACK")
        if self.store.is_slave:
            raise Rejected(Code.FORBIDDEN, "a slave does not end transactions")
        try:
            _host, physical = decode_message_id(request.transaction_id)
        except ValueError:
            raise Rejected(
                Code.INVALID_TRANSACTION_ID,
                f"transaction id {request.transaction_id!r} is not one this broker gave",
            ) from None
        half = self.transactions.half_message_at(physical)
        if (
            half is None
            or half.topic != HALF_TOPIC
            or half.properties.get(PROPERTY_REAL_TOPIC) != topic
            or half.properties.get(PROPERTY_UNIQ_KEY) != request.message_id
        ):
            raise Rejected(
                Code.INVALID_TRANSACTION_ID,
                f"no half message of topic {topic} and message id {request.message_id!r} "
                f"at transaction id {request.transaction_id}",
            )
        header = EndTransactionRequestHeader(
            producer_group=half.properties.get(PROPERTY_PRODUCER_GROUP, ""),
            tran_state_table_offset=half.queue_offset,
            commit_log_offset=physical,
            commit_or_rollback=resolution,
            msg_id=request.message_id,
            from_transaction_check=request.source == TransactionSource.SOURCE_SERVER_CHECK,
            transaction_id=request.transaction_id,
        )
        outcome = await self.transactions.end(header)
        if outcome.code == ResponseCode.SUCCESS:
            return EndTransactionResponse(status=ok())
        code = (
            Code.INVALID_TRANSACTION_ID
            if outcome.code == ResponseCode.TRANSACTION_FAILED
            else Code.INTERNAL_SERVER_ERROR
        )
        raise Rejected(code, outcome.remark or "the transaction could not end")

    # --- consuming (POP: broker/pop/service.py) --------------------------------------------

    def _pop(self) -> PopService:
        if self.pop is None:
            raise Rejected(Code.NOT_IMPLEMENTED, "POP consumption is not served by this broker")
        return self.pop

    async def receive_message(
        self, request: ReceiveMessageRequest, call: CallContext
    ) -> AsyncIterator[ReceiveMessageResponse]:
        """As RocketMQ's proxy writes the stream: status OK then one response per message, or
        one status (MESSAGE_NOT_FOUND when the long poll ended empty). An auto-renewed
        receive's messages stay invisible until acknowledged (broker/proxy/renewal.py)."""
        pop = self._pop()
        group = resource_name(request.group, NameKind.CONSUMER_GROUP)
        topic, _config, perm = self._topic(request.message_queue.topic)
        if not perm & PERM_READ:  # the topic's, masked by the broker's (brokerPermission)
            raise Rejected(Code.FORBIDDEN, f"receiving messages of topic[{topic}] is forbidden")
        config = self.config
        batch = request.batch_size or config.grpc_client_consumer_long_polling_batch_size
        if batch <= 0:
            raise Rejected(Code.ILLEGAL_INVISIBLE_TIME, "batch size must be positive")
        invisible = config.default_invisible_time_mills
        if request.HasField("invisible_duration") and not request.auto_renew:
            invisible = request.invisible_duration.ToMilliseconds()
            low, high = config.min_invisible_time_mills_for_recv, config.max_invisible_time_mills
            if not low <= invisible <= high:
                raise Rejected(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration {invisible} ms is outside [{low}, {high}] ms",
                )
        poll = config.grpc_client_consumer_max_long_polling_timeout_millis
        if request.HasField("long_polling_timeout"):
            asked = request.long_polling_timeout.ToMilliseconds()
            if asked < 0:
                raise Rejected(Code.ILLEGAL_POLLING_TIME, "long polling timeout is negative")
            poll = min(poll, asked)
        expression = request.filter_expression
        tags, record = MATCH_ALL, None
        try:
            if expression.type == FilterType.SQL:
                record = property_filter(self.state.config, "SQL92", expression.expression)
            else:
                tags = parse_tag_expression(expression.expression or "*")
        except (TideMQError, ValueError) as exc:
            raise Rejected(Code.ILLEGAL_FILTER_EXPRESSION, str(exc)) from None
        try:
            # Every queue of the topic on this broker, whatever queue the request names, as
            # RocketMQ's proxy pops (its broker-acting queue, id -1): the Node.js SimpleConsumer
            # names queue 0 in every receive and got nothing of the others.
            result = await pop.pop(group, topic, -1, batch, invisible, poll, tags, record)
        except PopRefused as refused:
            code = _RECEIVE_REFUSAL_CODES.get(refused.kind, Code.FORBIDDEN)
            raise Rejected(code, refused.reason) from None
        if not result.messages:
            yield ReceiveMessageResponse(
                status=Rejected(Code.MESSAGE_NOT_FOUND, "no new message").status()
            )
            return
        yield ReceiveMessageResponse(status=ok())
        renew = request.auto_renew and bool(call.client_id)
        for popped in result.messages:
            message = from_store(popped.message)
            message.topic.CopyFrom(request.message_queue.topic)  # a retry topic's too
            system = message.system_properties
            system.receipt_handle = popped.handle.encode()
            if renew:
                self.renewals.add(
                    (call.client_id, group),
                    system.message_id,
                    topic,
                    system.receipt_handle,
                    result.pop_time,
                )
            system.invisible_duration.CopyFrom(_duration_ms(result.invisible_time))
            system.delivery_attempt = popped.attempt
            yield ReceiveMessageResponse(message=message)

    async def ack_message(
        self, request: AckMessageRequest, call: CallContext
    ) -> AckMessageResponse:
        pop = self._pop()
        group = resource_name(request.group, NameKind.CONSUMER_GROUP)
        topic = resource_name(request.topic, NameKind.TOPIC)
        if not request.entries:
            raise Rejected(Code.BAD_REQUEST, "no entry to acknowledge")
        handles = [
            self._ending_renewal(call, group, entry.message_id, entry.receipt_handle)
            for entry in request.entries
        ]
        answers = await pop.ack_all(group, topic, handles)
        entries = []
        for entry, answer in zip(request.entries, answers, strict=True):
            if isinstance(answer, PopRefused):
                status = Rejected(Code.INVALID_RECEIPT_HANDLE, answer.reason).status()
            else:
                status = ok()
            entries.append(
                AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=status,
                )
            )
        return AckMessageResponse(status=_overall(entries), entries=entries)

    async def change_invisible_duration(
        self, request: ChangeInvisibleDurationRequest, call: CallContext
    ) -> ChangeInvisibleDurationResponse:
        pop = self._pop()
        group = resource_name(request.group, NameKind.CONSUMER_GROUP)
        topic = resource_name(request.topic, NameKind.TOPIC)
        invisible = request.invisible_duration.ToMilliseconds()
        # 0: visible again at once, as RocketMQ takes it (the Node.js push consumer's retry,
        # which has no backoff of the CUSTOMIZED kind the settings give, changes to 0).
        if not 0 <= invisible <= self.config.max_invisible_time_mills:
            raise Rejected(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible} ms")
        given = self._ending_renewal(call, group, request.message_id, request.receipt_handle)
        try:
            handle = await pop.change_invisible(group, topic, given, invisible)
        except PopRefused as refused:
            raise Rejected(Code.INVALID_RECEIPT_HANDLE, refused.reason) from None
        return ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle.encode())

    def _ending_renewal(self, call: CallContext, group: str, message_id: str, handle: str) -> str:
        """The handle to act on: a message in renewal stops being renewed, and its latest
        handle is used (the client knows only the one it received)."""
        renewed = self.renewals.remove((call.client_id, group), message_id)
        return renewed.handle if renewed is not None else handle

    async def renew_due(self) -> None:
        """Renew the messages of auto-renewed receives close to becoming visible (one pass;
        the broker runs it every renewSchedulePeriodMillis)."""
        pop = self.pop
        if pop is None:
            return
        config = self.config
        now = int(time.time() * 1000)
        for key, message_id, renewed in self.renewals.due(now, config.renew_ahead_time_millis):
            if now - renewed.received_ms >= config.renew_max_time_millis:
                self.renewals.remove(key, message_id)  # left to come back at its deadline
                continue
            step = renew_step_ms(renewed.renew_times)
            try:
                handle = await pop.change_invisible(key[1], renewed.topic, renewed.handle, step)
            except PopRefused:
                self.renewals.remove(key, message_id)  # acknowledged or visible already
                continue
            except Exception:
                log.exception("renewal of message %s", message_id)
                renewed.failures += 1
                if renewed.failures >= config.max_renew_retry_times:
                    self.renewals.remove(key, message_id)
                continue
            self.renewals.renewed(renewed, handle.encode(), int(time.time() * 1000))

    async def forward_message_to_dead_letter_queue(
        self, request: ForwardMessageToDeadLetterQueueRequest, call: CallContext
    ) -> ForwardMessageToDeadLetterQueueResponse:
        del call
        pop = self._pop()
        group = resource_name(request.group, NameKind.CONSUMER_GROUP)
        topic = resource_name(request.topic, NameKind.TOPIC)
        try:
            await pop.forward_to_dead_letter(group, topic, request.receipt_handle)
        except PopRefused as refused:
            if refused.kind is Refusal.NO_GROUP:
                raise Rejected(Code.CONSUMER_GROUP_NOT_FOUND, refused.reason) from None
            raise Rejected(Code.INVALID_RECEIPT_HANDLE, refused.reason) from None
        return ForwardMessageToDeadLetterQueueResponse(status=ok())


_RECEIVE_REFUSAL_CODES: Final = {
    Refusal.NO_TOPIC: Code.TOPIC_NOT_FOUND,
    Refusal.NO_GROUP: Code.CONSUMER_GROUP_NOT_FOUND,
    Refusal.POLLING_FULL: Code.TOO_MANY_REQUESTS,
}

_RECALL_REFUSAL_CODES: Final = {
    RecallRefusal.NOT_SERVED: Code.FORBIDDEN,
    RecallRefusal.NO_TOPIC: Code.TOPIC_NOT_FOUND,
    RecallRefusal.BAD_HANDLE: Code.BAD_REQUEST,
    RecallRefusal.OTHER_BROKER: Code.NOT_FOUND,
    RecallRefusal.TOO_LATE: Code.ILLEGAL_DELIVERY_TIME,
    RecallRefusal.TOO_FAR: Code.ILLEGAL_DELIVERY_TIME,
    RecallRefusal.UNKNOWN: Code.NOT_FOUND,
    RecallRefusal.STORE: Code.INTERNAL_SERVER_ERROR,
}

_END_STATES: Final = {
    TransactionResolution.COMMIT: TRANSACTION_COMMIT_TYPE,
    TransactionResolution.ROLLBACK: TRANSACTION_ROLLBACK_TYPE,
}


def _overall(entries: Sequence[SendResultEntry | AckMessageResultEntry]) -> Status:
    """A request's status over its entries' (at least one): theirs when they agree, else
    MULTIPLE_RESULTS (RocketMQ's proxy)."""
    if len({entry.status.code for entry in entries}) > 1:
        return Rejected(Code.MULTIPLE_RESULTS, "MULTIPLE_RESULTS").status()
    return entries[0].status


def choose_queue(write_queue_nums: int, message_group: str) -> int:
    """A message group always goes to the same queue (FIFO); others to any writable queue."""
    count = max(1, write_queue_nums)
    if message_group:
        return zlib.crc32(message_group.encode()) % count
    return random.randrange(count)


def _duration_ms(millis: int) -> Duration:
    return Duration(seconds=millis // 1000, nanos=(millis % 1000) * 1_000_000)
