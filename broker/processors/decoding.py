"""A processor's reading of a request: its header and its body, or the request's refusal.

`request_header(cls, request)` is `client.protocol.headers.decode` of the request's extFields;
a missing or malformed field refuses the request (`RequestRejected`) with SYSTEM_ERROR and a
remark naming the field, e.g. "the custom field <topic> is null" (RocketMQ's words) or
"queueId: not an integer: 'zero'". `request_body(parse, request, what)` runs a body parser; a
body it cannot read refuses the request with SYSTEM_ERROR and "bad <what> body: <why>". The
server's dispatch answers the refusal in the request's serialisation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tidemq.broker.remoting.server import RequestRejected
from tidemq.client.protocol.headers import HeaderFieldError, decode
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import BodyDecodeError

H = TypeVar("H")
T = TypeVar("T")


def request_header(cls: type[H], request: RemotingCommand, keys: dict[str, str] | None = None) -> H:
    """The request's header as `cls` (`keys` renames fields: attribute -> wire key)."""
    try:
        return decode(cls, request.ext_fields, keys)
    except HeaderFieldError as exc:
        raise RequestRejected(ResponseCode.SYSTEM_ERROR, str(exc)) from None


def request_body(parse: Callable[[Body], T], request: RemotingCommand, what: str) -> T:
    """`parse(request.body)`; a body that is not what `parse` reads refuses the request."""
    try:
        return parse(request.body)
    except (BodyDecodeError, ValueError) as exc:
        raise RequestRejected(ResponseCode.SYSTEM_ERROR, f"bad {what} body: {exc}") from None
