"""The transactional producer's END_TRANSACTION: sent oneway, as RocketMQ's producer sends it
(DefaultMQProducerImpl.endTransaction), and a request that cannot be written is logged.

A fake client instance takes the oneway request; no socket.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tidemq.client.errors import ConnectError
from tidemq.client.message import SendResult, SendStatus
from tidemq.client.protocol.headers import EndTransactionRequestHeader, decode
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transaction import AsyncTransactionProducer, LocalTransactionState
from tidemq.store.record import message_id, pack_host


class _Remoting:
    def __init__(self, error: BaseException | None) -> None:
        self.error = error
        self.oneway: list[tuple[str, RemotingCommand]] = []

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


def _producer(error: BaseException | None = None) -> tuple[AsyncTransactionProducer, _Remoting]:
    producer = AsyncTransactionProducer(
        "PG-end",
        "127.0.0.1:1",
        execute=lambda msg, arg: LocalTransactionState.COMMIT,
        check=lambda msg: LocalTransactionState.COMMIT,
    )
    remoting = _Remoting(error)
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
