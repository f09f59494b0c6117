"""What a SQL92 subscription becomes on this broker: a record filter, or a refusal.

With `enablePropertyFilter=false` (RocketMQ's default) an SQL92 subscription is refused with
SYSTEM_ERROR and RocketMQ's remark; an expression that does not compile is refused with
SUBSCRIPTION_PARSE_FAILED and a remark naming the problem (broker/sql92.py); an expression type
other than TAG and SQL92 likewise. Used by the pull (each pull's subscription) and by
CHECK_CLIENT_CONFIG (a consumer's start). The SQL92 compiler is imported by the first SQL92
subscription: building its grammar costs a broker's start-up about 50 ms, and most brokers
never see one (enablePropertyFilter is off by default).
"""

from __future__ import annotations

from tidemq.broker.config import BrokerConfig
from tidemq.broker.remoting.server import RequestRejected
from tidemq.client.protocol.heartbeat import ExpressionType
from tidemq.client.remoting.codes import ResponseCode
from tidemq.store.get_message import RecordFilter


def property_filter(
    config: BrokerConfig, expression_type: str, expression: str | None
) -> RecordFilter:
    """The record filter of a non-TAG subscription; `RequestRejected` when it is refused."""
    if expression_type.upper() != ExpressionType.SQL92.value:
        raise RequestRejected(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"expression type {expression_type!r} is neither TAG nor SQL92",
        )
    if not config.enable_property_filter:
        raise RequestRejected(
            ResponseCode.SYSTEM_ERROR,
            "The broker does not support consumer to filter message by SQL92 "
            "(enablePropertyFilter=false)",
        )
    from tidemq.broker.sql92 import Sql92Error, compile_sql92

    try:
        return compile_sql92(expression or "")
    except Sql92Error as exc:
        raise RequestRejected(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"SQL92 expression refused: {exc}"
        ) from None
