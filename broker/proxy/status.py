"""RocketMQ 5 statuses: the one rejection an RPC raises, and the store's answers as codes.

Every RPC answers `Status{code, message}` (definition.proto's Code: 20000 OK, 4xxxx the
client's fault, 5xxxx the server's); a handler raises `Rejected(code, message)` and the server
turns it into the response's status in one place (broker/proxy/server.py).
"""

from __future__ import annotations

from typing import Final

from tidemq.broker.proxy.protocol.definition_pb2 import Code, Status
from tidemq.store.commitlog import PutStatus


class Rejected(Exception):
    """A request refused with a RocketMQ 5 status code and a message naming the cause."""

    def __init__(self, code: Code.ValueType, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> Status:
        return Status(code=self.code, message=self.message)


def ok() -> Status:
    return Status(code=Code.OK, message="OK")


# The store's put statuses as RocketMQ 5's proxy reports them; the ones it leaves to
# INTERNAL_SERVER_ERROR get a code that says whose fault it is where one fits.
PUT_STATUS_CODES: Final[dict[PutStatus, Code.ValueType]] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.TOO_MANY_REQUESTS: Code.TOO_MANY_REQUESTS,
    PutStatus.OS_PAGECACHE_BUSY: Code.TOO_MANY_REQUESTS,
    PutStatus.SERVICE_NOT_AVAILABLE: Code.FORBIDDEN,
    # The store's own check of a timer message (store/timer_message.py): the client's delivery
    # time, not the broker, is at fault.
    PutStatus.WHEEL_TIMER_MSG_ILLEGAL: Code.ILLEGAL_DELIVERY_TIME,
    PutStatus.WHEEL_TIMER_FLOW_CONTROL: Code.TOO_MANY_REQUESTS,
}


def put_status_code(status: PutStatus) -> Code.ValueType:
    return PUT_STATUS_CODES.get(status, Code.INTERNAL_SERVER_ERROR)
