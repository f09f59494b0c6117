"""One `parse_namesrv_addr` for the client, the admin API and the Spark source (RocketMQ's form)."""

from __future__ import annotations

import pytest

from tidemq.client.admin import api as admin
from tidemq.client.admin.api import AdminClient
from tidemq.client.config import ClientConfig, parse_namesrv_addr
from tidemq.client.errors import ClientError
from tidemq.client.spark.options import OptionError, SourceOptions


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("h1:9876", ["h1:9876"]),
        ("h1:9876;h2:9876", ["h1:9876", "h2:9876"]),
        (" h1:9876 ;\th2:9876 ; ", ["h1:9876", "h2:9876"]),  # blanks and a trailing ';'
        ("h1:9876,h2:9876", ["h1:9876", "h2:9876"]),  # ',' as the Spark option always took
        ("[::1]:9876;10.0.0.1:1", ["[::1]:9876", "10.0.0.1:1"]),
        (["h1:1", " h2:2 ", ""], ["h1:1", "h2:2"]),
        (("h1:65535",), ["h1:65535"]),
        ("", []),
        (" ; ", []),
    ],
)
def test_addresses_are_read_as_rocketmq_writes_them(
    value: str | list[str] | tuple[str, ...], expected: list[str]
) -> None:
    assert parse_namesrv_addr(value) == expected


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        ("nohost", "nohost"),
        ("h1:9876;h2", "h2"),
        ("h1:", "h1:"),
        (":9876", ":9876"),
        ("h1:0", "h1:0"),
        ("h1:65536", "h1:65536"),
        ("h1:98x6", "h1:98x6"),
        ("h1:9876 h2:9876", "h1:9876 h2:9876"),  # a blank is not a separator
        ("::1:9876", "::1:9876"),  # IPv6 needs its brackets
        (["h1:1", "bad"], "bad"),
    ],
)
def test_a_bad_entry_is_a_client_error_naming_it(value: str | list[str], bad: str) -> None:
    with pytest.raises(ClientError) as caught:
        parse_namesrv_addr(value)
    assert f"{bad!r} is not host:port" in str(caught.value)


def test_none_reads_namesrv_addr_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NAMESRV_ADDR", "h1:1; h2:2")
    assert parse_namesrv_addr(None) == ["h1:1", "h2:2"]
    assert ClientConfig.create().namesrv_addr == ("h1:1", "h2:2")
    monkeypatch.delenv("NAMESRV_ADDR")
    assert parse_namesrv_addr(None) == []
    assert ClientConfig.create().namesrv_addr == ()  # the instance complains when it starts


async def test_client_admin_and_spark_use_the_same_parser() -> None:
    assert admin.parse_namesrv_addr is parse_namesrv_addr
    assert ClientConfig.create(" h1:1;h2:2 ").namesrv_addr == ("h1:1", "h2:2")
    with pytest.raises(ClientError, match="'h2' is not host:port"):
        ClientConfig.create("h1:1;h2")
    async with AdminClient(" h1:1;h2:2 ") as client:
        assert client.namesrv_addrs == ["h1:1", "h2:2"]
    with pytest.raises(ClientError, match="'h2' is not host:port"):
        AdminClient("h1:1;h2")
    with pytest.raises(ClientError, match="no name server address"):
        AdminClient(" ; ")
    options = SourceOptions.parse({"namesrvAddr": " h1:1;h2:2 ", "topic": "T"}, streaming=True)
    assert options.namesrv_addr == ("h1:1", "h2:2")
    with pytest.raises(OptionError, match=r"namesrvAddr: .*'h2' is not host:port"):
        SourceOptions.parse({"namesrvAddr": "h1:1;h2", "topic": "T"}, streaming=True)
