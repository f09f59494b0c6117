"""Message.encoded_properties: its one-string path for messages of at most a tag writes what
encode_properties(all_properties(...)) writes, for every message (timer messages included)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.client.message import Message
from tidemq.store.record import encode_properties

WORDS = st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), max_size=6)


@given(
    st.one_of(st.none(), WORDS),
    st.one_of(st.none(), WORDS, st.lists(WORDS, max_size=3)),
    st.dictionaries(st.sampled_from(["a", "UNIQ_KEY", "TAGS", "WAIT", "DELAY"]), WORDS, max_size=3),
    st.integers(0, 3),
    st.booleans(),
    st.one_of(st.none(), WORDS),
    st.one_of(st.none(), st.integers(0, 2**45)),
    st.one_of(st.none(), st.integers(0, 2**32)),
)
def test_encoded_properties_are_those_of_all_properties(
    tags: str | None,
    keys: str | list[str] | None,
    properties: dict[str, str],
    delay_level: int,
    wait: bool,
    uniq_key: str | None,
    deliver_at_ms: int | None,
    delay_ms: int | None,
) -> None:
    msg = Message(
        "T",
        b"x",
        tags,
        keys,
        properties,
        delay_level,
        wait,
        deliver_at_ms=deliver_at_ms,
        delay_ms=delay_ms,
    )
    expected = encode_properties(msg.all_properties(uniq_key))
    assert msg.encoded_properties(uniq_key) == expected


def test_a_plain_message_has_wait_and_its_unique_key() -> None:
    assert Message("T", b"x").encoded_properties("ID") == "WAIT\x01true\x02UNIQ_KEY\x01ID\x02"
    assert (
        Message("T", b"x", "A", wait_store_msg_ok=False).encoded_properties("ID")
        == "TAGS\x01A\x02WAIT\x01false\x02UNIQ_KEY\x01ID\x02"
    )
