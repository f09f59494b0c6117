"""Transactional producers: `AsyncTransactionProducer` (asyncio) and `TransactionProducer`
(blocking), with the same methods and callbacks (RocketMQ 4.x's TransactionMQProducer).

`send_message_in_transaction(msg, arg)`:

1. sends the message as a half message (properties TRAN_MSG=true and PGROUP, sysFlag PREPARED):
   the broker keeps it out of its topic;
2. runs the local-transaction callback `execute(msg, arg)`, which returns a
   `LocalTransactionState` (an exception counts as UNKNOWN); when the half message was not stored
   the callback does not run and the state is ROLLBACK;
3. ends the transaction with END_TRANSACTION (37) to the broker that stored the half message,
   oneway as RocketMQ's producer sends it (no wait for the broker's answer): COMMIT makes the
   message visible to consumers, ROLLBACK drops it, UNKNOWN leaves it open.

A transaction left open (UNKNOWN, a lost END, a producer that died) is resolved by the broker's
check: CHECK_TRANSACTION_STATE (39) reaches any started producer of the group, whose
`check(msg)` callback answers again with a `LocalTransactionState`, sent back as
END_TRANSACTION with fromTransactionCheck. Callbacks of the asyncio producer may be plain
functions or coroutine functions; the blocking producer runs its callbacks in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeAlias

from tidemq.client.config import ClientConfig
from tidemq.client.errors import ClientError, TideMQError
from tidemq.client.message import Message, ReceivedMessage, SendResult, SendStatus
from tidemq.client.producer import (
    AUTO_CREATE_TOPIC,
    DEFAULT_SEND_TIMEOUT,
    AsyncProducer,
    _compress,
)
from tidemq.client.protocol.headers import EndTransactionRequestHeader, header_schema
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.sync import BlockingTwin, call
from tidemq.client.trace import MessageType, TraceRecord, TraceType, now_ms
from tidemq.client.transport.connection import RemotingConnection
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.store.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from tidemq.store.record import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    decode_message_offset,
)

log = logging.getLogger(__name__)

# Kept, not looked up per transaction (see header_schema).
_ENCODE_END: Final = header_schema(EndTransactionRequestHeader).encode


class LocalTransactionState(enum.Enum):
    """A local transaction's outcome; the value is END_TRANSACTION's commitOrRollback."""

    COMMIT = TRANSACTION_COMMIT_TYPE
    ROLLBACK = TRANSACTION_ROLLBACK_TYPE
    UNKNOWN = TRANSACTION_NOT_TYPE


StateOrAwaitable: TypeAlias = LocalTransactionState | Awaitable[LocalTransactionState]
LocalTransactionExecutor = Callable[[Message, Any], StateOrAwaitable]
TransactionChecker = Callable[[ReceivedMessage], StateOrAwaitable]


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """The half message's send result, and how its transaction ended here."""

    send_result: SendResult
    local_transaction_state: LocalTransactionState
    transaction_id: str

    @property
    def msg_id(self) -> str:
        """The half message's client msgId (UNIQ_KEY), as the committed message keeps it."""
        return self.send_result.msg_id


def _half_message(msg: Message, group: str) -> Message:
    """`msg` as its half message: its properties and TRAN_MSG=true, PGROUP=group. What
    dataclasses.replace makes, field by field in order (replace looks the fields up per call)."""
    return Message(
        msg.topic,
        msg.body,
        msg.tags,
        msg.keys,
        {**msg.properties, PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: group},
        msg.delay_level,
        msg.wait_store_msg_ok,
        msg.flag,
        msg.deliver_at_ms,
        msg.delay_ms,
    )


# The items a half message's properties start with when the message has no user properties
# (TRAN_MSG, then PGROUP: what `_half_message` puts first).
_TRAN_MSG_ITEM: Final = f"{PROPERTY_TRANSACTION_PREPARED}\x01true\x02"


def _half_properties(msg: Message, group: str, uniq: str) -> str:
    """`_half_message(msg, group).encoded_properties(uniq)`; without the copy of the message
    and the dict of its properties when it has no user properties (the two transaction items
    come first, then what the message itself carries)."""
    if msg.properties:
        return _half_message(msg, group).encoded_properties(uniq)
    return f"{_TRAN_MSG_ITEM}{PROPERTY_PRODUCER_GROUP}\x01{group}\x02{msg.encoded_properties(uniq)}"


def _end_fields(
    group: str, offset_msg_id: str, queue_offset: int, msg_id: str, state: LocalTransactionState
) -> dict[str, str]:
    """END_TRANSACTION's extFields for a half message this producer sent: what the header's
    schema encodes for `EndTransactionRequestHeader(group, queue_offset, the offset of
    offset_msg_id, state.value, msg_id, transaction_id=msg_id)`, without the header object.
    ValueError for a malformed offset_msg_id."""
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(queue_offset),
        "commitLogOffset": str(decode_message_offset(offset_msg_id)),
        "commitOrRollback": _STATE_TEXT[state],
        "msgId": msg_id,
        "fromTransactionCheck": "false",
        "transactionId": msg_id,
    }


async def _state_of(outcome: StateOrAwaitable, what: str) -> LocalTransactionState:
    """A callback's answer; anything but a LocalTransactionState (or an exception) is UNKNOWN."""
    if type(outcome) is LocalTransactionState:  # a plain callback's answer: no awaitable test
        return outcome
    try:
        state: object = await outcome if inspect.isawaitable(outcome) else outcome
    except Exception:
        log.exception("%s raised: the transaction stays UNKNOWN", what)
        return LocalTransactionState.UNKNOWN
    if not isinstance(state, LocalTransactionState):
        log.warning("%s returned %r, not a LocalTransactionState: UNKNOWN", what, state)
        return LocalTransactionState.UNKNOWN
    return state


# commitOrRollback as END_TRANSACTION's extFields carry it.
_STATE_TEXT: Final = {state: str(state.value) for state in LocalTransactionState}

# LocalTransactionState's names in Java, as EndTransaction trace records carry them.
_TRACE_STATE: Final = {
    LocalTransactionState.COMMIT: "COMMIT_MESSAGE",
    LocalTransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
    LocalTransactionState.UNKNOWN: "UNKNOW",
}


class AsyncTransactionProducer(AsyncProducer):
    """`AsyncProducer` (the same other parameters) plus `send_message_in_transaction`;
    `execute(msg, arg)` runs the local transaction and `check(msg)` answers the broker's check
    of one left open, each returning a `LocalTransactionState` (module docstring)."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        execute: LocalTransactionExecutor,
        check: TransactionChecker,
        config: ClientConfig | None = None,
        timeout: float = DEFAULT_SEND_TIMEOUT,
        retry_times: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        compress_over: int = 4096,
        max_message_size: int = 4 * 1024 * 1024,
        default_topic_queue_nums: int = 4,
        latency_fault_enabled: bool = False,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        super().__init__(
            group,
            namesrv_addr,
            config=config,
            timeout=timeout,
            retry_times=retry_times,
            retry_another_broker_when_not_store_ok=retry_another_broker_when_not_store_ok,
            compress_over=compress_over,
            max_message_size=max_message_size,
            default_topic_queue_nums=default_topic_queue_nums,
            latency_fault_enabled=latency_fault_enabled,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
            enable_trace=enable_trace,
            trace_topic=trace_topic,
        )
        self.execute = execute
        self.check = check

    async def start(self) -> None:
        """Also learn the brokers TBW102 lives on before the first heartbeat (Java's producer
        starts with TBW102 in its publish table): a producer that only answers checks, like
        one restarted after a crash, must be known to the brokers that hold its half messages."""
        await super().start()
        self.instance.register_transaction_checker(self.group, self._on_check)
        with contextlib.suppress(TideMQError):
            await self.instance.update_route(AUTO_CREATE_TOPIC)
        await self.instance.heartbeat_all()

    async def stop(self) -> None:
        """Stop answering checks, then stop as `AsyncProducer.stop`."""
        if self._instance is not None:
            self._instance.unregister_transaction_checker(self.group)
        await super().stop()

    async def send_message_in_transaction(
        self, msg: Message, arg: Any = None, *, timeout: float | None = None
    ) -> TransactionSendResult:
        """Send `msg` as a half message, run the local transaction, end it (module docstring)."""
        self._check(msg)  # first: the delay test below compares a checked int
        if msg.delay_level > 0:
            raise ClientError("a transactional message cannot be delayed")
        uniq = self._ids.next_id()
        body, sys_flag = _compress(msg.body, self.compress_over)
        started = time.monotonic()
        try:
            # the message itself stands for its half message there: what it reads of it, its
            # topic and flag, are the same
            result = await self._send_with_retries(
                msg,
                body,
                _half_properties(msg, self.group, uniq),
                sys_flag | TRANSACTION_PREPARED_TYPE,
                uniq,
                None,
                None,
                None,
                timeout,
                batch=False,
            )
        except TideMQError:
            self.trace_pub(msg, uniq, None, started, MessageType.TRANS_HALF)
            raise
        self.trace_pub(msg, uniq, result, started, MessageType.TRANS_HALF)
        if result.status is SendStatus.SEND_OK:
            state = await _state_of(self.execute(msg, arg), "the local transaction")
        else:
            state = LocalTransactionState.ROLLBACK
        await self._end(result, state)
        self._trace_end(msg, uniq, state, from_check=False)
        return TransactionSendResult(result, state, result.msg_id)

    def _trace_end(
        self,
        msg: Message | ReceivedMessage,
        msg_id: str,
        state: LocalTransactionState,
        *,
        from_check: bool,
    ) -> None:
        """An EndTransaction record (with enable_trace)."""
        if self.trace is None:
            return
        keys = msg.key_list
        self.trace.add(
            [
                TraceRecord(
                    TraceType.END_TRANSACTION,
                    msg_id,
                    now_ms(),
                    self.group,
                    msg.topic,
                    msg.tags or "",
                    " ".join(keys),
                    msg_type=MessageType.TRANS_COMMIT,
                    transaction_id=msg_id,
                    transaction_state=_TRACE_STATE[state],
                    from_transaction_check=from_check,
                )
            ]
        )

    async def _end(self, result: SendResult, state: LocalTransactionState) -> None:
        """END_TRANSACTION for a half message this producer sent, oneway as RocketMQ's
        DefaultMQProducerImpl.endTransaction sends it: the producer does not wait for the
        broker. A request that cannot be written (no connection, closed, or not writable within
        the send timeout) is logged here; one the broker refuses is logged by the broker (its
        END_TRANSACTION processor). Either way the transaction stays open and the broker's
        check asks this producer group again."""
        if state is LocalTransactionState.UNKNOWN:
            return
        address = self.instance.find_broker_address_in_publish(result.message_queue.broker_name)
        if address is None:
            log.warning(
                "no address for broker %s: END_TRANSACTION left to the check",
                result.message_queue.broker_name,
            )
            return
        fields = _end_fields(
            self.group, result.offset_msg_id, result.queue_offset, result.msg_id, state
        )
        api = self.instance.api
        request = api.request(RequestCode.END_TRANSACTION, fields)
        connection = api.remoting.ready_connection(address)
        if connection is not None and connection.oneway_now(request):
            return  # written with this loop iteration's others, no coroutine
        try:
            # a wait only for a connection, or for a paused one to take writes again
            await api.remoting.invoke_oneway(address, request, self.timeout)
        except (TideMQError, ConnectionError, TimeoutError) as exc:
            log.warning(
                "END_TRANSACTION %s of %s not sent: %s (the broker will check)",
                state.name,
                result.msg_id,
                str(exc) or type(exc).__name__,
            )

    async def _on_check(
        self,
        connection: RemotingConnection,
        msg: ReceivedMessage,
        tran_state_table_offset: int,
        commit_log_offset: int,
    ) -> None:
        """A broker's CHECK_TRANSACTION_STATE: ask `check`, answer oneway on its connection."""
        state = await _state_of(self.check(msg), "the transaction check")
        self._trace_end(msg, msg.msg_id, state, from_check=True)
        if state is LocalTransactionState.UNKNOWN:
            return
        header = EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=tran_state_table_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=state.value,
            msg_id=msg.msg_id,
            from_transaction_check=True,
            transaction_id=msg.msg_id,
        )
        request = self.instance.api.request(RequestCode.END_TRANSACTION, _ENCODE_END(header))
        try:
            await connection.oneway(request)
        except (ConnectionError, TimeoutError) as exc:
            log.info("answer to the check of %s not sent: %s", msg.msg_id, exc)


def _in_thread(callback: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def run(*args: Any) -> Any:
        return await asyncio.to_thread(callback, *args)

    return run


class TransactionProducer(BlockingTwin[AsyncTransactionProducer]):
    """The blocking twin of `AsyncTransactionProducer`: the same parameters, the same methods;
    the callbacks are plain functions, run in a worker thread."""

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        execute: Callable[[Message, Any], LocalTransactionState],
        check: Callable[[ReceivedMessage], LocalTransactionState],
        config: ClientConfig | None = None,
        timeout: float = DEFAULT_SEND_TIMEOUT,
        retry_times: int = 2,
        retry_another_broker_when_not_store_ok: bool = False,
        compress_over: int = 4096,
        max_message_size: int = 4 * 1024 * 1024,
        default_topic_queue_nums: int = 4,
        latency_fault_enabled: bool = False,
        access_key: str = "",
        secret_key: str = "",
        tls: TlsClientSettings | None = None,
        enable_trace: bool = False,
        trace_topic: str | None = None,
    ) -> None:
        self._async = AsyncTransactionProducer(
            group,
            namesrv_addr,
            execute=_in_thread(execute),
            check=_in_thread(check),
            config=config,
            timeout=timeout,
            retry_times=retry_times,
            retry_another_broker_when_not_store_ok=retry_another_broker_when_not_store_ok,
            compress_over=compress_over,
            max_message_size=max_message_size,
            default_topic_queue_nums=default_topic_queue_nums,
            latency_fault_enabled=latency_fault_enabled,
            access_key=access_key,
            secret_key=secret_key,
            tls=tls,
            enable_trace=enable_trace,
            trace_topic=trace_topic,
        )
        self.group = group

    def send_message_in_transaction(
        self, msg: Message, arg: Any = None, *, timeout: float | None = None
    ) -> TransactionSendResult:
        """Send `msg` as a half message, run the local transaction, end it (module docstring)."""
        return call(self._async.send_message_in_transaction(msg, arg, timeout=timeout))
