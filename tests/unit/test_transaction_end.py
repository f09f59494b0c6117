"""The transactional producer's END_TRANSACTION: sent oneway, as RocketMQ's producer sends it
(DefaultMQProducerImpl.endTransaction), and a request that cannot be written is logged; the half
message, the END header's offset and a callback's state made as before, more cheaply.

A fake client instance takes the oneway request; no socket.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.errors import ConnectError
from tidemq.client.message import Message, SendResult, SendStatus
from tidemq.client.protocol.headers import EndTransactionRequestHeader, decode
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transaction import (
    _ENCODE_END,
    AsyncTransactionProducer,
    LocalTransactionState,
    _end_fields,
    _half_message,
    _half_properties,
    _state_of,
)
from tidemq.store.record import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_PREPARED,
    decode_message_id,
    decode_message_offset,
    message_id,
    pack_host,
)


class _Connection:
    """An open connection that takes writes now (`writable`) or is paused."""

    def __init__(self, writable: bool) -> None:
        self.writable = writable
        self.sent: list[RemotingCommand] = []

    def oneway_now(self, command: RemotingCommand) -> bool:
        if self.writable:
            command.flag |= 2
            self.sent.append(command)
        return self.writable


class _Remoting:
    def __init__(self, error: BaseException | None, connection: _Connection | None = None) -> None:
        self.error = error
        self.connection = connection
        self.oneway: list[tuple[str, RemotingCommand]] = []

    def ready_connection(self, address: str) -> _Connection | None:
        return self.connection

    async def invoke_oneway(
        self, address: str, request: RemotingCommand, timeout: float | None = None
    ) -> None:
        if self.error is not None:
            raise self.error
        self.oneway.append((address, request))

    async def invoke(self, *args: Any, **kwargs: Any) -> RemotingCommand:
        raise AssertionError("END_TRANSACTION waited for an answer")


class _Api:
    def __init__(self, remoting: _Remoting) -> None:
        self.remoting = remoting

    def request(self, code: int, ext: dict[str, str]) -> RemotingCommand:
        return RemotingCommand.request(code, ext)

    async def call(self, *args: Any, **kwargs: Any) -> RemotingCommand:
        raise AssertionError("END_TRANSACTION waited for an answer")


class _Instance:
    def __init__(self, remoting: _Remoting) -> None:
        self.api = _Api(remoting)

    def find_broker_address_in_publish(self, broker_name: str) -> str:
        return f"{broker_name}:10911"


def _producer(
    error: BaseException | None = None, connection: _Connection | None = None
) -> tuple[AsyncTransactionProducer, _Remoting]:
    producer = AsyncTransactionProducer(
        "PG-end",
        "127.0.0.1:1",
        execute=lambda msg, arg: LocalTransactionState.COMMIT,
        check=lambda msg: LocalTransactionState.COMMIT,
    )
    remoting = _Remoting(error, connection)
    producer._instance = _Instance(remoting)  # type: ignore[assignment]
    return producer, remoting


def _half(commit_log_offset: int = 4096, queue_offset: int = 7) -> SendResult:
    return SendResult(
        SendStatus.SEND_OK,
        "UNIQ",
        message_id(pack_host("127.0.0.1", 10911), commit_log_offset),
        MessageQueue("T", "b1", 0),
        queue_offset,
    )


@pytest.mark.parametrize("state", [LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK])
async def test_end_transaction_goes_oneway_with_the_half_message_offsets(
    state: LocalTransactionState,
) -> None:
    producer, remoting = _producer()
    await producer._end(_half(), state)
    ((address, request),) = remoting.oneway
    header = decode(EndTransactionRequestHeader, request.ext_fields)
    assert (address, request.code) == ("b1:10911", RequestCode.END_TRANSACTION)
    assert (header.commit_log_offset, header.tran_state_table_offset) == (4096, 7)
    assert (header.commit_or_rollback, header.producer_group) == (state.value, "PG-end")
    assert not header.from_transaction_check


@pytest.mark.parametrize("writable", [True, False])
async def test_end_transaction_goes_on_an_open_connection_without_a_coroutine(
    writable: bool,
) -> None:
    connection = _Connection(writable)
    producer, remoting = _producer(connection=connection)
    await producer._end(_half(), LocalTransactionState.COMMIT)
    # a paused connection: the request waits in invoke_oneway, as before
    sent = connection.sent if writable else [request for _address, request in remoting.oneway]
    (request,) = sent
    assert request.code == RequestCode.END_TRANSACTION
    header = decode(EndTransactionRequestHeader, request.ext_fields)
    assert (header.commit_log_offset, header.tran_state_table_offset) == (4096, 7)
    assert len(connection.sent) + len(remoting.oneway) == 1


async def test_an_unknown_state_sends_nothing() -> None:
    producer, remoting = _producer()
    await producer._end(_half(), LocalTransactionState.UNKNOWN)
    assert remoting.oneway == []


@pytest.mark.parametrize(
    "error", [ConnectError("cannot connect to b1:10911: refused"), TimeoutError()]
)
async def test_an_end_that_cannot_be_written_is_logged_and_left_to_the_check(
    error: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    producer, _remoting = _producer(error)
    with caplog.at_level(logging.WARNING, logger="tidemq.client.transaction"):
        await producer._end(_half(), LocalTransactionState.COMMIT)
    (record,) = caplog.records
    message = record.getMessage()
    assert "END_TRANSACTION COMMIT of UNIQ not sent" in message
    assert "the broker will check" in message
    assert (str(error) or type(error).__name__) in message


# --- the half message and the END header, without their per-transaction overheads -----------

messages = st.builds(
    Message,
    topic=st.text(max_size=8),
    body=st.binary(max_size=16),
    tags=st.none() | st.text(max_size=4),
    keys=st.none() | st.text(max_size=8) | st.lists(st.text(max_size=4), max_size=3),
    properties=st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
    delay_level=st.integers(0, 18),
    wait_store_msg_ok=st.booleans(),
    flag=st.integers(-(2**31), 2**31 - 1),
    deliver_at_ms=st.none() | st.integers(0, 2**45),
    delay_ms=st.none() | st.integers(0, 2**40),
)


@given(messages, st.text(max_size=8))
def test_a_half_message_is_the_message_with_the_transaction_properties(
    msg: Message, group: str
) -> None:
    expected = dataclasses.replace(
        msg,
        properties={
            **msg.properties,
            PROPERTY_TRANSACTION_PREPARED: "true",
            PROPERTY_PRODUCER_GROUP: group,
        },
    )
    half = _half_message(msg, group)
    assert half == expected
    assert half.properties is not msg.properties


@given(messages, st.text(max_size=8), st.text(max_size=8))
def test_the_half_messages_properties_are_those_of_the_half_message(
    msg: Message, group: str, uniq: str
) -> None:
    assert _half_properties(msg, group, uniq) == _half_message(msg, group).encoded_properties(uniq)


@given(
    st.text(max_size=8),
    st.sampled_from(["127.0.0.1", "fe80::1"]),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=8),
    st.sampled_from([LocalTransactionState.COMMIT, LocalTransactionState.ROLLBACK]),
)
def test_the_end_fields_are_the_end_headers_encoding(
    group: str, host: str, offset: int, queue_offset: int, msg_id: str, state: LocalTransactionState
) -> None:
    offset_msg_id = message_id(pack_host(host, 10911), offset)
    header = EndTransactionRequestHeader(
        group, queue_offset, offset, state.value, msg_id, transaction_id=msg_id
    )
    fields = _end_fields(group, offset_msg_id, queue_offset, msg_id, state)
    assert fields == _ENCODE_END(header)
    assert list(fields) == list(_ENCODE_END(header))  # the same order on the wire


def test_the_half_message_copies_every_field_of_a_message() -> None:
    # _half_message names Message's fields one by one: a new field must be added there too.
    assert [f.name for f in dataclasses.fields(Message)] == [
        "topic",
        "body",
        "tags",
        "keys",
        "properties",
        "delay_level",
        "wait_store_msg_ok",
        "flag",
        "deliver_at_ms",
        "delay_ms",
    ]


@given(st.sampled_from(["127.0.0.1", "10.1.2.3", "fe80::1"]), st.integers(-(2**63), 2**63 - 1))
def test_the_offset_of_a_message_id_is_the_one_decode_message_id_gives(
    host: str, offset: int
) -> None:
    msg_id = message_id(pack_host(host, 10911), offset)
    assert decode_message_offset(msg_id) == decode_message_id(msg_id)[1] == offset


@pytest.mark.parametrize("bad", ["", "zz", "00" * 15, "00" * 17, "00" * 29])
def test_a_malformed_message_id_is_refused_alike(bad: str) -> None:
    with pytest.raises(ValueError) as offset_error:
        decode_message_offset(bad)
    with pytest.raises(ValueError) as id_error:
        decode_message_id(bad)
    assert str(offset_error.value) == str(id_error.value)


async def test_a_plain_state_and_an_awaitable_one_are_answered_alike() -> None:
    async def later() -> LocalTransactionState:
        return LocalTransactionState.ROLLBACK

    assert await _state_of(LocalTransactionState.COMMIT, "x") is LocalTransactionState.COMMIT
    assert await _state_of(later(), "x") is LocalTransactionState.ROLLBACK
    assert await _state_of("COMMIT", "x") is LocalTransactionState.UNKNOWN  # type: ignore[arg-type]
