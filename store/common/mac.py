"""`Mac`: what signing code needs of a keyed HMAC (request signatures, HA proofs).

`hmac.HMAC` has it, and so has the OpenSSL HMAC object CPython's `hmac.HMAC` wraps, which
`client.remoting.signing.signing_key` hands out (pure twin) to save the wrapper's Python frames
per call; its compiled twin hands out an `_HmacSha1` (client/remoting/_codec.pyx), whose copies
allocate no OpenSSL context.
"""

from __future__ import annotations

from typing import Protocol


class Mac(Protocol):
    """A keyed HMAC: `copy()` it, `update` the copy, take its `digest`."""

    def copy(self) -> Mac: ...

    def update(self, data: bytes | bytearray | memoryview, /) -> None: ...

    def digest(self) -> bytes: ...
