"""Types of the compiled twin in client/protocol/_headers.pyx (mypy cannot read Cython)."""

from tidemq.client.protocol.headers import SendMessageRequestHeader

def decode_send_header(ext: dict[str, str], short_keys: bool) -> SendMessageRequestHeader: ...
