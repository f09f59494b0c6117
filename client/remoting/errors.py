"""The remoting codec's exception tree.

`RemotingProtocolError` is the root, a `TideMQError`. What the peer sent (`FrameError`, and
`HeaderDecodeError` beneath it, and `BodyDecodeError`) is kept apart from what we were asked to
send (`EncodeError`): a bad frame means the connection is out of sync and must be closed, a bad
command is a bug or bad input on our side and the connection is still fine. What the peer sent
is also a `DecodeError`, the base of every format error (see `client.errors`).
"""

from __future__ import annotations

from tidemq.common.errors import DecodeError, TideMQError


class RemotingProtocolError(TideMQError):
    """Root of every error raised by the remoting codec."""


class FrameError(RemotingProtocolError, DecodeError):
    """The peer's bytes do not form a valid frame; the stream is unusable and must be closed."""


class HeaderDecodeError(FrameError):
    """A frame's header could not be decoded in the serialisation its frame announced."""


class EncodeError(RemotingProtocolError, ValueError):
    """A command cannot be represented on the wire (for example a code too large for a short)."""


class BodyDecodeError(RemotingProtocolError, DecodeError, ValueError):
    """A body is not the JSON (or fastjson dialect of JSON) the caller expected."""
