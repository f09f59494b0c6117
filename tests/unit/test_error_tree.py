"""One exception tree: every error a client user can catch is a TideMQError (client.errors).

The walk below imports every module of the client package and fails on any exception class
defined there outside the tree, so a new `class FooError(Exception)` cannot slip in. The remoting
client raises the tree's connect and timeout errors itself (nothing translates them again), and
a name server's error answer is the leaf of its response code.
"""

from __future__ import annotations

import asyncio
import importlib
import pickle
import pkgutil
from typing import Any

import pytest

from tidemq import client
from tidemq.client.admin.cli.base import CommandError
from tidemq.client.api import BrokerAPI
from tidemq.client.errors import (
    BrokerResponseError,
    BrokerSystemError,
    ClientError,
    ConnectError,
    DecodeError,
    FlowControlError,
    MessageIllegalError,
    NamesrvResponseError,
    QueryNotFoundError,
    RemotingError,
    RequestTimeoutError,
    TideMQError,
    TopicNotExistError,
)
from tidemq.client.protocol.headers import HeaderFieldError, SendMessageRequestHeader, decode
from tidemq.client.protocol.namesrv import (
    GetRouteInfoRequestHeader,
    NamesrvProtocolError,
    TopicList,
    check_success,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import (
    BodyDecodeError,
    EncodeError,
    FrameError,
    HeaderDecodeError,
    RemotingProtocolError,
)
from tidemq.client.remoting.frame import FrameDecoder
from tidemq.client.remoting.json_body import loads_fastjson
from tidemq.client.spark.brokers import DataLossError, SourceError
from tidemq.client.spark.options import OptionError
from tidemq.client.transport.client import RemotingClient
from tidemq.client.transport.connection import ConnectionClosedError
from tidemq.ha.codec import AckDecoder, HAProtocolError
from tidemq.store import errors as store_errors
from tidemq.store.batch_body import BatchDecodeError, read_batch_message
from tidemq.store.record import RecordFormatError, RecordTooLargeError, decode_record


def _client_modules() -> list[Any]:
    names = [m.name for m in pkgutil.walk_packages(client.__path__, "tidemq.client.")]
    return [importlib.import_module(name) for name in sorted(names)]


def _exceptions_defined_in(module: Any) -> list[type[BaseException]]:
    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__
    ]


def test_every_exception_class_of_the_client_is_a_tidemq_error() -> None:
    found = [cls for module in _client_modules() for cls in _exceptions_defined_in(module)]
    # The walk reached the modules that define errors (it is no proof when it finds none).
    reached = {ConnectionClosedError, HeaderFieldError, NamesrvProtocolError, OptionError}
    assert reached | {CommandError, SourceError, BodyDecodeError, TopicNotExistError} <= set(found)
    outside = [
        f"{cls.__module__}.{cls.__qualname__}" for cls in found if not issubclass(cls, TideMQError)
    ]
    assert outside == []


def test_store_and_ha_errors_a_client_can_meet_are_in_the_tree() -> None:
    for cls in (RecordFormatError, BatchDecodeError, HAProtocolError, RecordTooLargeError):
        assert issubclass(cls, TideMQError)
    for cls in _exceptions_defined_in(store_errors):
        assert issubclass(cls, TideMQError), cls


def test_builtin_bases_are_kept_where_callers_catch_them() -> None:
    assert issubclass(RequestTimeoutError, TimeoutError)
    assert issubclass(ConnectError, ConnectionError)
    assert issubclass(ConnectionClosedError, ConnectError)
    for cls in (
        HeaderFieldError,
        NamesrvProtocolError,
        BodyDecodeError,
        EncodeError,
        RecordFormatError,
        BatchDecodeError,
        RecordTooLargeError,
        OptionError,
    ):
        assert issubclass(cls, ValueError), cls


RETRIABLE = [RemotingError, RequestTimeoutError, ConnectError, ConnectionClosedError]
NOT_RETRIABLE = [
    TideMQError,
    ClientError,
    CommandError,
    OptionError,
    DecodeError,
    RemotingProtocolError,
    SourceError,
    DataLossError,
    BrokerResponseError,
]


@pytest.mark.parametrize("cls", RETRIABLE)
def test_remoting_failures_are_retriable(cls: type[TideMQError]) -> None:
    assert cls.retriable


@pytest.mark.parametrize("cls", NOT_RETRIABLE)
def test_misuse_format_and_unknown_answers_are_not_retriable(cls: type[TideMQError]) -> None:
    assert not cls.retriable


@pytest.mark.parametrize(
    ("code", "leaf", "retriable"),
    [
        (ResponseCode.TOPIC_NOT_EXIST, TopicNotExistError, True),
        (ResponseCode.SYSTEM_ERROR, BrokerSystemError, True),
        (ResponseCode.FLOW_CONTROL, FlowControlError, True),
        (ResponseCode.MESSAGE_ILLEGAL, MessageIllegalError, False),
        (ResponseCode.QUERY_NOT_FOUND, QueryNotFoundError, False),
        (12345, BrokerResponseError, False),
    ],
)
def test_for_code_gives_the_leaf_for_broker_and_name_server_answers(
    code: int, leaf: type[BrokerResponseError], retriable: bool
) -> None:
    from_broker = BrokerResponseError.for_code(code, "why")
    assert type(from_broker) is leaf
    assert (from_broker.code, from_broker.remark, from_broker.retriable) == (code, "why", retriable)
    assert str(from_broker).startswith(f"CODE: {code} ")

    from_namesrv = NamesrvResponseError.for_code(code, "why")
    assert isinstance(from_namesrv, leaf) and isinstance(from_namesrv, NamesrvResponseError)
    assert isinstance(from_namesrv, TideMQError)
    assert (from_namesrv.code, from_namesrv.remark, from_namesrv.retriable) == (
        code,
        "why",
        retriable,
    )
    assert str(from_namesrv).startswith("name server answered ")
    # The combined class is made once per leaf, not per answer.
    assert type(NamesrvResponseError.for_code(code)) is type(from_namesrv)


def test_check_success_raises_the_name_servers_leaf() -> None:
    request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    response = RemotingCommand.response_to(request, ResponseCode.TOPIC_NOT_EXIST, "no route")
    with pytest.raises(TopicNotExistError) as caught:
        check_success(response)
    assert isinstance(caught.value, NamesrvResponseError)
    assert caught.value.retriable
    check_success(response, ResponseCode.TOPIC_NOT_EXIST)  # an expected code is no error


# --- decode errors ---------------------------------------------------------------------------


def _raised(fn: Any, *args: Any) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:
        return exc
    raise AssertionError(f"{fn.__name__} accepted {args!r}")


def test_every_format_error_is_a_decode_error() -> None:
    def bad_frame() -> None:
        FrameDecoder().feed(b"\x00\x00\x00\x00")  # a frame too short to hold its header length

    def negative_ack() -> None:
        AckDecoder().feed((-1).to_bytes(8, "big", signed=True))

    raised = [
        _raised(decode, SendMessageRequestHeader, {}),
        _raised(GetRouteInfoRequestHeader.from_ext_fields, {}),
        _raised(TopicList.decode, b"[1]"),
        _raised(loads_fastjson, b"{not json"),
        _raised(bad_frame),
        _raised(negative_ack),
        _raised(decode_record, b"\x00" * 8),
        _raised(read_batch_message, memoryview(b"\x00" * 4), 0),
    ]
    kinds = [type(exc) for exc in raised]
    assert kinds == [
        HeaderFieldError,
        NamesrvProtocolError,
        NamesrvProtocolError,
        BodyDecodeError,
        kinds[4],  # FrameError or its HeaderDecodeError leaf
        HAProtocolError,
        RecordFormatError,
        BatchDecodeError,
    ]
    assert issubclass(kinds[4], FrameError)
    assert issubclass(HeaderDecodeError, FrameError)
    for exc in raised:
        assert isinstance(exc, DecodeError), exc


# --- the remoting client raises the tree's errors itself ----------------------------------


class _Connection:
    """Stands in for a RemotingConnection: answers every request with `outcome`."""

    def __init__(self, outcome: BaseException) -> None:
        self.outcome = outcome
        self.is_open = True

    async def request(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        raise self.outcome


def _client_with(outcome: BaseException) -> RemotingClient:
    remoting = RemotingClient(idle_timeout=0)
    remoting._connections["h:1"] = _Connection(outcome)  # type: ignore[assignment]
    return remoting


async def test_a_request_without_an_answer_is_a_request_timeout_error() -> None:
    api = BrokerAPI(_client_with(TimeoutError()))
    request = RemotingCommand.request(RequestCode.HEART_BEAT)
    with pytest.raises(RequestTimeoutError, match="no response from h:1") as caught:
        await api.invoke("h:1", request, 0.5)
    assert isinstance(caught.value, TimeoutError) and caught.value.retriable


async def test_a_connection_closed_while_waiting_reaches_the_caller_untranslated() -> None:
    closed = ConnectionClosedError("connection to h:1 closed")
    api = BrokerAPI(_client_with(closed))
    with pytest.raises(ConnectError) as caught:
        await api.invoke("h:1", RemotingCommand.request(RequestCode.HEART_BEAT), 0.5)
    assert caught.value is closed


async def test_an_unreachable_address_is_a_connect_error(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()

    async def refuse(*args: object, **kwargs: object) -> Any:
        raise ConnectionRefusedError("refused")

    monkeypatch.setattr(loop, "create_connection", refuse)
    api = BrokerAPI(RemotingClient(idle_timeout=0))
    with pytest.raises(ConnectError, match="cannot connect to h:1") as caught:
        await api.invoke("h:1", RemotingCommand.request(RequestCode.HEART_BEAT), 0.5)
    assert isinstance(caught.value, ConnectionError) and caught.value.retriable
    with pytest.raises(ConnectError):
        await api.send_oneway("h:1", SendMessageRequestHeader("PG", "T"), b"x")


@pytest.mark.parametrize(
    "error",
    [
        BrokerResponseError.for_code(ResponseCode.TOPIC_NOT_EXIST, "no route"),
        BrokerResponseError.for_code(9999, "unknown"),
        NamesrvResponseError.for_code(ResponseCode.TOPIC_NOT_EXIST, "no route"),
        NamesrvResponseError.for_code(9999, "unknown"),
        NamesrvResponseError(ResponseCode.SYSTEM_ERROR, "bad"),
        TopicNotExistError(ResponseCode.TOPIC_NOT_EXIST, "no route"),
    ],
)
def test_response_errors_survive_pickle(error: BrokerResponseError) -> None:
    # Spark ships exceptions between processes; the name server's leaves are built at run time.
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (copy.code, copy.remark, str(copy)) == (error.code, error.remark, str(error))
