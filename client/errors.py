"""tidemq's exception tree, shared by the client, the admin tools and the broker.

Every error a user of the client can catch is a `TideMQError`. The root and `DecodeError` live in
`common.errors` (the bottom layer, so that store, ha and broker errors belong to the same tree)
and are re-exported here. `retriable` (False unless marked R) says the same call may succeed if made
again, or sent to another broker::

    TideMQError                   common.errors
    +-- ClientError               local misuse: bad arguments, a client that is not started
    |   +-- InvalidMessageError   a message the client will not send; `field` names what is
    |   |                         wrong (client.validators; also ValueError)
    |   +-- OptionError           a Spark source option (client.spark.options; also ValueError)
    |   +-- CommandError          an mqadmin command's one-line failure (client.admin.cli.base)
    +-- RemotingError          R  the request got no answer
    |   +-- RequestTimeoutError R no response in time (also TimeoutError)
    |   +-- ConnectError       R  the address cannot be reached (also ConnectionError)
    |       +-- ConnectionClosedError  R  closed while waiting (client.transport.connection)
    +-- BrokerResponseError       a broker or name server answered with an error code
    |   +-- one leaf per response code (TopicNotExistError R, NoPermissionError R, ...)
    |   +-- NamesrvResponseError  the name server's answer; its leaves are the same codes' leaves
    +-- DecodeError               common.errors: input does not follow its format
    |   +-- HeaderFieldError      a request header field (client.protocol.headers; ValueError)
    |   +-- NamesrvProtocolError  a name-server header or body (client.protocol.namesrv; ValueError)
    |   +-- FrameError            a frame from the peer (client.remoting.errors)
    |   |   +-- HeaderDecodeError its header
    |   +-- BodyDecodeError       a JSON body (client.remoting.errors; ValueError)
    |   +-- RecordFormatError     a stored record (store.record; ValueError)
    |   +-- BatchDecodeError      a batch body (store.batch_body; ValueError)
    |   +-- HAProtocolError       the HA stream (ha.codec)
    +-- RemotingProtocolError     the remoting codec (client.remoting.errors): FrameError and
    |   +-- EncodeError           BodyDecodeError above, and a command we cannot send (ValueError)
    +-- SourceError               the Spark source cannot go on (client.spark.brokers)
    |   +-- DataLossError
    +-- RecordTooLargeError       a message over a size limit (store.record; ValueError)
    +-- RequestRejected           a server refusing a request with a code (broker.remoting.server)
    +-- StoreError                common.errors: ConfigError, StoreLockedError, CorruptStoreError

`BrokerResponseError.for_code(code, remark)` builds the leaf for a response code (an unknown code
gives the base class); `NamesrvResponseError.for_code` builds the same leaf, also a
`NamesrvResponseError`, so `except TopicNotExistError` and `except NamesrvResponseError` both
catch a name server's TOPIC_NOT_EXIST. A leaf is `retriable` where retrying can help, and the
producer retries exactly what is marked so (client/producer.py reads `retriable`, it keeps no list
of its own): RocketMQ 4.x's `retryResponseCodes` (TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE,
SYSTEM_ERROR, NO_PERMISSION, NO_BUYER_ID, NOT_IN_CURRENT_UNIT), and SYSTEM_BUSY and FLOW_CONTROL,
which clear with time and leave nothing stored, so a retry on another broker cannot duplicate.
"""

from __future__ import annotations

from typing import Any, ClassVar

from tidemq.client.remoting.codes import ResponseCode
from tidemq.common.errors import DecodeError, TideMQError

__all__ = [
    "BrokerResponseError",
    "BrokerSystemError",
    "ClientError",
    "ConnectError",
    "DecodeError",
    "FlowControlError",
    "InvalidMessageError",
    "MessageIllegalError",
    "NamesrvResponseError",
    "NoBuyerIdError",
    "NoPermissionError",
    "NotInCurrentUnitError",
    "QueryNotFoundError",
    "RemotingError",
    "RequestCodeNotSupportedError",
    "RequestTimeoutError",
    "ServiceNotAvailableError",
    "SubscriptionGroupNotExistError",
    "SubscriptionNotExistError",
    "SystemBusyError",
    "TideMQError",
    "TopicNotExistError",
]


class ClientError(TideMQError):
    """The caller did something the client cannot do (bad argument, wrong state)."""


class InvalidMessageError(ClientError, ValueError):
    """A message (or a send's queue) the producer refuses before anything is written: `field`
    names the part that is wrong ("body", "topic", "tags", "keys", "properties", ...)."""

    def __init__(self, field: str, text: str) -> None:
        super().__init__(text)
        self.field = field

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, str(self)))


class RemotingError(TideMQError):
    """The request did not get an answer: no connection, or no response in time."""

    retriable = True


class RequestTimeoutError(RemotingError, TimeoutError):
    """No response arrived in time."""


class ConnectError(RemotingError, ConnectionError):
    """The address could not be reached, or the connection closed before the answer."""


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


class BrokerResponseError(TideMQError):
    """A server's error response; `code` is its ResponseCode number, `remark` its text."""

    code: int = -1
    _registry: ClassVar[dict[int, type[BrokerResponseError]]] = {}

    def __init__(self, code: int, remark: str | None = None) -> None:
        self.code = code
        self.remark = remark or ""
        super().__init__(self._message(_code_name(code)))

    def _message(self, name: str) -> str:
        return f"CODE: {self.code} ({name}) DESC: {self.remark}"  # as RocketMQ's clients say

    def __init_subclass__(cls, code: int | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            BrokerResponseError._registry[code] = cls

    @classmethod
    def for_code(cls, code: int, remark: str | None = None) -> BrokerResponseError:
        """The error for `code`: its registered leaf, made a `cls` too when `cls` is a branch."""
        leaf = BrokerResponseError._registry.get(code, BrokerResponseError)
        if cls is not BrokerResponseError:
            leaf = _branch_leaf(cls, leaf)
        return leaf(code, remark)

    def __reduce__(self) -> tuple[Any, ...]:
        branch = _BRANCH_OF.get(type(self))
        if branch is not None:
            # Built by `for_code` for a branch, so in no module where pickle (Spark,
            # multiprocessing) could find it: rebuilt the way it was made, from the branch.
            return (branch.for_code, (self.code, self.remark))
        return (type(self), (self.code, self.remark))


_BRANCH_LEAVES: dict[tuple[type[BrokerResponseError], type[BrokerResponseError]], type[Any]] = {}
_BRANCH_OF: dict[type[BrokerResponseError], type[BrokerResponseError]] = {}


def _branch_leaf(
    branch: type[BrokerResponseError], leaf: type[BrokerResponseError]
) -> type[BrokerResponseError]:
    """The class that is both `branch` (who answered) and `leaf` (what the code means)."""
    if issubclass(leaf, branch):
        return leaf
    combined = _BRANCH_LEAVES.get((branch, leaf))
    if combined is None:
        name = f"{branch.__name__.removesuffix('ResponseError')}{leaf.__name__}"
        combined = type(name, (branch, leaf), {"__module__": __name__, "__qualname__": name})
        _BRANCH_LEAVES[(branch, leaf)] = combined
        _BRANCH_OF[combined] = branch
    return combined


class NamesrvResponseError(BrokerResponseError):
    """The name server answered a request with a code other than the one expected."""

    def _message(self, name: str) -> str:
        return f"name server answered {name} ({self.code}): {self.remark}".rstrip(": ")


class BrokerSystemError(BrokerResponseError, code=ResponseCode.SYSTEM_ERROR):
    retriable = True


class SystemBusyError(BrokerResponseError, code=ResponseCode.SYSTEM_BUSY):
    retriable = True


class RequestCodeNotSupportedError(
    BrokerResponseError, code=ResponseCode.REQUEST_CODE_NOT_SUPPORTED
):
    pass


class MessageIllegalError(BrokerResponseError, code=ResponseCode.MESSAGE_ILLEGAL):
    pass


class ServiceNotAvailableError(BrokerResponseError, code=ResponseCode.SERVICE_NOT_AVAILABLE):
    retriable = True


class NoPermissionError(BrokerResponseError, code=ResponseCode.NO_PERMISSION):
    retriable = True


class TopicNotExistError(BrokerResponseError, code=ResponseCode.TOPIC_NOT_EXIST):
    retriable = True


class SubscriptionGroupNotExistError(
    BrokerResponseError, code=ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
):
    pass


class SubscriptionNotExistError(BrokerResponseError, code=ResponseCode.SUBSCRIPTION_NOT_EXIST):
    pass


class SubscriptionParseFailedError(
    BrokerResponseError, code=ResponseCode.SUBSCRIPTION_PARSE_FAILED
):
    """A subscription expression the broker refuses (an SQL92 expression that does not parse)."""


class QueryNotFoundError(BrokerResponseError, code=ResponseCode.QUERY_NOT_FOUND):
    pass


class FlowControlError(BrokerResponseError, code=ResponseCode.FLOW_CONTROL):
    retriable = True


class NoBuyerIdError(BrokerResponseError, code=ResponseCode.NO_BUYER_ID):
    retriable = True  # in RocketMQ's retryResponseCodes


class NotInCurrentUnitError(BrokerResponseError, code=ResponseCode.NOT_IN_CURRENT_UNIT):
    retriable = True  # in RocketMQ's retryResponseCodes
