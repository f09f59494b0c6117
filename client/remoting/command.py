"""`RemotingCommand`: one request or response of the RocketMQ remoting protocol, without I/O.

A command is what a frame carries once decoded: the header fields (`code`, `language`,
`version`, `opaque`, `flag`, `remark`, `extFields`), the body bytes, and the serialisation its
header used (a response goes back in the serialisation of its request). An outgoing command's
body may go on in `body_views`: contiguous buffers that the frame carries after `body`, written
without being joined into one. Numbers stay plain `int`s so that codes and languages we do not
know pass through unchanged; compare them with the enums in `client.remoting.codes`.

Opaque (correlation id) allocation is the connection's job, not this module's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, TypeAlias

from tidemq.client.remoting.codes import DEFAULT_VERSION, LanguageCode, SerializeType

__all__ = ["Body", "RemotingCommand"]

# Outgoing bodies may be views into larger buffers (a pulled message range); decoded ones are bytes.
Body: TypeAlias = bytes | bytearray | memoryview

_RESPONSE: Final = 1
_ONEWAY: Final = 2
_PYTHON: Final = int(LanguageCode.PYTHON)


@dataclass(slots=True)
class RemotingCommand:
    """One remoting command. Mutable so a connection can stamp its `opaque` before sending.

    Made per request, so the codecs construct it positionally: keep the field order.
    """

    code: int
    language: int = _PYTHON
    version: int = DEFAULT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: Body = b""
    serialize_type: SerializeType = SerializeType.JSON
    # Outgoing only: more body after `body`, written as it is (a pull's records: views of the
    # mapped CommitLog, sent without joining them). Decoded commands never have any.
    body_views: tuple[memoryview, ...] = ()

    @property
    def is_response(self) -> bool:
        """True for a response (flag bit 0)."""
        return bool(self.flag & _RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """True for a request that expects no response (flag bit 1)."""
        return bool(self.flag & _ONEWAY)

    @property
    def language_name(self) -> str:
        """The language's RocketMQ name, or its number when it is not one we know."""
        try:
            return LanguageCode(self.language).name
        except ValueError:
            return str(self.language)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: Body = b"",
        *,
        oneway: bool = False,
        remark: str | None = None,
        opaque: int = 0,
        language: int = _PYTHON,
        version: int = DEFAULT_VERSION,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A request; `opaque` is normally left at 0 for the connection to assign."""
        # positional, in field order: one is made per request
        return cls(
            int(code),
            int(language),
            version,
            opaque,
            _ONEWAY if oneway else 0,
            remark,
            {} if ext_fields is None else ext_fields,
            body,
            serialize_type,
        )

    @classmethod
    def response_to(
        cls,
        request: RemotingCommand,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: Body = b"",
        *,
        language: int = _PYTHON,
        version: int = DEFAULT_VERSION,
    ) -> RemotingCommand:
        """The response to `request`: same opaque and serialisation, the response flag set.

        Language and version are the responder's own, as RocketMQ's createResponseCommand does.
        """
        return cls(
            int(code),
            int(language),
            version,
            request.opaque,
            _RESPONSE,
            remark,
            {} if ext_fields is None else ext_fields,
            body,
            request.serialize_type,
        )
