"""Types of the compiled twins in client/consumer/_received.pyx (mypy cannot read Cython)."""

from tidemq.client.message import ReceivedMessage

def decode_received(
    body: bytes | bytearray | memoryview, broker_name: str
) -> list[ReceivedMessage]: ...
def put_messages(
    messages: dict[int, ReceivedMessage], msgs: list[ReceivedMessage], highest: int
) -> tuple[list[ReceivedMessage], int, int]: ...
def forget_messages(messages: dict[int, ReceivedMessage], msgs: list[ReceivedMessage]) -> int: ...
