"""Every store put status has its RocketMQ response code in the send processor's answer."""

from __future__ import annotations

from tidemq.broker.processors.send import _STATUS_CODES
from tidemq.client.errors import BrokerResponseError, SystemBusyError
from tidemq.client.remoting.codes import ResponseCode
from tidemq.store.commitlog import PutStatus


def test_every_put_status_has_a_response_code() -> None:
    assert set(_STATUS_CODES) == set(PutStatus)


def test_too_many_waiting_sends_is_system_busy_a_retriable_error() -> None:
    code, remark = _STATUS_CODES[PutStatus.TOO_MANY_REQUESTS]
    assert code == ResponseCode.SYSTEM_BUSY
    error = BrokerResponseError.for_code(code, remark)
    assert isinstance(error, SystemBusyError)
    assert error.retriable
