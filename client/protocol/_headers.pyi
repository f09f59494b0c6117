"""Types of the compiled twin in client/protocol/_headers.pyx (mypy cannot read Cython)."""

from tidemq.client.protocol.headers import SendMessageRequestHeader

def decode_send_header(ext: dict[str, str], short_keys: bool) -> SendMessageRequestHeader: ...
def send_v2_ext_fields(
    producer_group: str,
    topic: str,
    default_topic: str,
    default_topic_queue_nums: int,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str | None,
    batch: bool,
) -> dict[str, str]: ...
def check_message(msg: object, max_size: int | None = None) -> None: ...
