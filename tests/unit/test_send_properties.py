"""The send processor's CLUSTER property: appended to canonical text, re-encoded otherwise."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidemq.broker.processors.send import peer_born_host, with_cluster
from tidemq.store.record import PROPERTY_CLUSTER, decode_properties, encode_properties, pack_host

# Pieces that make well-formed, malformed, repeated and CLUSTER-carrying property texts likely.
PIECES = st.sampled_from(["\x01", "\x02", "a", "b", "TAGS", PROPERTY_CLUSTER, "\x01x\x02", ""])
TEXTS = st.lists(PIECES, max_size=12).map("".join)
PROPERTIES = st.dictionaries(
    st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", PROPERTY_CLUSTER, "a", ""]),
    st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), max_size=6),
)


def reference(properties: str, cluster: str) -> str:
    """What the broker stored before the fast path: decode, set CLUSTER, encode."""
    props = decode_properties(properties)
    props[PROPERTY_CLUSTER] = cluster
    return encode_properties(props)


@given(TEXTS, st.text(max_size=5))
def test_any_text_gets_what_decode_and_encode_give(text: str, cluster: str) -> None:
    assert with_cluster(text, cluster) == reference(text, cluster)


@given(PROPERTIES, st.text(max_size=5))
def test_encoded_properties_get_what_decode_and_encode_give(
    props: dict[str, str], cluster: str
) -> None:
    text = encode_properties(props)
    assert with_cluster(text, cluster) == reference(text, cluster)


def test_canonical_text_is_appended_to() -> None:
    text = encode_properties({"TAGS": "A", "UNIQ_KEY": "K"})
    assert with_cluster(text, "C") == text + "CLUSTER\x01C\x02"
    assert with_cluster("", "C") == "CLUSTER\x01C\x02"


def test_other_text_is_normalised() -> None:
    # a repeated name keeps its first place and its last value; items without a pair drop out
    assert (
        with_cluster("A\x011\x02B\x012\x02A\x013\x02", "C")
        == "A\x013\x02B\x012\x02CLUSTER\x01C\x02"
    )
    assert with_cluster("A\x011\x02junk\x02", "C") == "A\x011\x02CLUSTER\x01C\x02"
    assert with_cluster("A\x011", "C") == "A\x011\x02CLUSTER\x01C\x02"
    assert with_cluster("CLUSTER\x01old\x02A\x011\x02", "C") == "CLUSTER\x01C\x02A\x011\x02"


def test_born_host_is_parsed_per_peer_address() -> None:
    assert peer_born_host("10.1.2.3:4567") == pack_host("10.1.2.3", 4567)
    assert peer_born_host("[::1]:80") == pack_host("::1", 80)
    assert peer_born_host("not an address") == pack_host("127.0.0.1", 0)
    assert peer_born_host("") == pack_host("127.0.0.1", 0)
