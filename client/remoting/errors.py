"""The remoting codec's exception tree.

`RemotingProtocolError` is the root. What the peer sent (`FrameError`, and `HeaderDecodeError`
beneath it) is kept apart from what we were asked to send (`EncodeError`): the first means the
connection is out of sync and must be closed, the second is a bug or bad input on our side and
the connection is still fine.
"""

from __future__ import annotations


class RemotingProtocolError(Exception):
    """Root of every error raised by the remoting codec."""


class FrameError(RemotingProtocolError):
    """The peer's bytes do not form a valid frame; the stream is unusable and must be closed."""


class HeaderDecodeError(FrameError):
    """A frame's header could not be decoded in the serialisation its frame announced."""


class EncodeError(RemotingProtocolError, ValueError):
    """A command cannot be represented on the wire (for example a code too large for a short)."""


class BodyDecodeError(RemotingProtocolError, ValueError):
    """A body is not the JSON (or fastjson dialect of JSON) the caller expected."""
