"""tidemq's exception tree, shared by the client, the admin tools and the broker.

    TideMQError
    +-- ClientError              local misuse: bad arguments, a client that is not started
    +-- RemotingError            the network: RequestTimeoutError, ConnectError
    +-- BrokerResponseError      the broker or name server answered with an error code
        +-- one leaf per response code (TopicNotExistError, NoPermissionError, ...)

`BrokerResponseError.for_code(code, remark)` builds the leaf for a response code (any unknown
code gives the base class). `retriable` tells whether RocketMQ's producer would try another
broker after it (TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION, ...).
"""

from __future__ import annotations

from typing import ClassVar

from client.remoting.codes import ResponseCode


class TideMQError(Exception):
    """Root of every tidemq error."""


class ClientError(TideMQError):
    """The caller did something the client cannot do (bad argument, wrong state)."""


class RemotingError(TideMQError):
    """The request did not get an answer: no connection, or no response in time."""


class RequestTimeoutError(RemotingError, TimeoutError):
    pass


class ConnectError(RemotingError, ConnectionError):
    pass


class BrokerResponseError(TideMQError):
    """A server's error response; `code` is its ResponseCode number, `remark` its text."""

    code: int = -1
    retriable: ClassVar[bool] = False
    _registry: ClassVar[dict[int, type[BrokerResponseError]]] = {}

    def __init__(self, code: int, remark: str | None = None) -> None:
        self.code = code
        self.remark = remark or ""
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"CODE: {code} ({name}) DESC: {self.remark}")

    def __init_subclass__(cls, code: int | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            BrokerResponseError._registry[code] = cls

    @staticmethod
    def for_code(code: int, remark: str | None = None) -> BrokerResponseError:
        cls = BrokerResponseError._registry.get(code, BrokerResponseError)
        return cls(code, remark)


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


class QueryNotFoundError(BrokerResponseError, code=ResponseCode.QUERY_NOT_FOUND):
    pass


class FlowControlError(BrokerResponseError, code=ResponseCode.FLOW_CONTROL):
    retriable = True
