"""Store configuration: MessageStoreConfig keys and defaults, properties files, overrides.

The expected defaults are RocketMQ 4.9.7's (MessageStoreConfig.java), written out here as the
text a properties file would hold.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tidemq.broker.properties import load_properties, parse_overrides, parse_properties
from tidemq.common.errors import ConfigError, StoreError
from tidemq.common.settings import from_properties, to_properties, unknown_keys
from tidemq.store.config import AppendMode, BrokerRole, FlushDiskType, StoreConfig
from tidemq.store.delay import parse_delay_levels
from tidemq.store.services import disk_used_ratio

ROCKETMQ_DEFAULTS = {
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "mappedFileSizeCommitLog": str(1024 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(300_000 * 20),
    "flushIntervalCommitLog": "500",
    "flushCommitLogLeastPages": "4",
    "flushCommitLogThoroughInterval": "10000",
    "commitIntervalCommitLog": "200",
    "flushIntervalConsumeQueue": "1000",
    "flushConsumeQueueLeastPages": "2",
    "flushConsumeQueueThoroughInterval": "60000",
    "syncFlushTimeout": "5000",
    "fileReservedTime": "72",
    "deleteWhen": "04",
    "diskMaxUsedSpaceRatio": "75",
    "diskSpaceCleanForciblyRatio": "0.85",
    "diskSpaceWarningLevelRatio": "0.9",
    "maxMessageSize": str(4 * 1024 * 1024),
    "checkCRCOnRecover": "true",
    "transientStorePoolEnable": "false",
    "transientStorePoolSize": "5",
    "accessMessageInMemoryMaxRatio": "40",
    "maxTransferBytesOnMessageInMemory": str(256 * 1024),
    "maxTransferCountOnMessageInMemory": "32",
    "maxTransferBytesOnMessageInDisk": str(64 * 1024),
    "maxTransferCountOnMessageInDisk": "8",
    "offsetCheckInSlave": "false",
    "messageIndexEnable": "true",
    "maxHashSlotNum": "5000000",
    "maxIndexNum": "20000000",
    "cleanResourceInterval": "10000",
    "destroyMapedFileIntervalForcibly": "120000",
    "messageDelayLevel": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
}


def test_rocketmq_key_names_and_defaults() -> None:
    effective = to_properties(StoreConfig())
    for key, value in ROCKETMQ_DEFAULTS.items():
        assert effective[key] == value, key
    config = StoreConfig()
    assert config.broker_role is BrokerRole.ASYNC_MASTER
    assert config.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert config.consume_queue_file_size == 6_000_000
    assert config.delete_hours == frozenset({4})
    config.validate()


def test_default_delay_levels() -> None:
    levels = parse_delay_levels(StoreConfig().message_delay_level)
    s, m, h = 1000, 60_000, 3_600_000
    assert levels == [
        *(1 * s, 5 * s, 10 * s, 30 * s),
        *(n * m for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)),
        *(1 * h, 2 * h),
    ]
    assert parse_delay_levels("0s 1d") == [0, 86_400_000]


def test_values_are_read_by_their_rocketmq_keys(tmp_path: Path) -> None:
    props = {
        "storePathRootDir": str(tmp_path),
        "mappedFileSizeCommitLog": "65536",
        "maxMessageSize": "2048",
        "brokerRole": "SLAVE",
        "flushDiskType": "SYNC_FLUSH",
        "checkCRCOnRecover": "FALSE",
        "destroyMapedFileIntervalForcibly": "5",  # RocketMQ's spelling
        "diskSpaceWarningLevelRatio": "0.95",
        "deleteWhen": "04;16",
        "appendMode": "mmap",
        "offsetCheckInSlave": " true ",
        "somebodyElsesKey": "whatever",
    }
    config = from_properties(StoreConfig, props)
    assert config.root == tmp_path
    assert config.commit_log_dir == tmp_path / "commitlog"
    assert config.mapped_file_size_commit_log == 65536
    assert config.max_message_size == 2048
    assert config.broker_role is BrokerRole.SLAVE
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.check_crc_on_recover is False
    assert config.destroy_mapped_file_interval_forcibly == 5
    assert config.disk_space_warning_level_ratio == 0.95
    assert config.delete_hours == frozenset({4, 16})
    assert config.append_mode is AppendMode.mmap
    assert config.offset_check_in_slave is True
    assert unknown_keys(props, [StoreConfig]) == ["somebodyElsesKey"]
    # What the config prints reads back to the same config.
    assert from_properties(StoreConfig, to_properties(config)) == config


BAD_VALUES = [
    ("mappedFileSizeCommitLog", "1G"),
    ("mappedFileSizeCommitLog", "1024"),  # below the minimum
    ("maxMessageSize", "-1"),
    ("checkCRCOnRecover", "yes"),
    ("brokerRole", "MASTER"),
    ("flushDiskType", "async_flush"),
    ("diskMaxUsedSpaceRatio", "99"),
    ("diskSpaceWarningLevelRatio", "ninety"),
    ("accessMessageInMemoryMaxRatio", "101"),
    ("deleteWhen", "25"),
    ("deleteWhen", "four"),
    ("messageDelayLevel", "1s 5x"),
    ("messageDelayLevel", ""),
    ("transientStorePoolSize", "0"),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_a_bad_value_raises_config_error_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_properties(StoreConfig, {key: value})
    assert key in str(info.value)
    assert isinstance(info.value, StoreError)


def test_commitlog_file_must_hold_the_largest_message() -> None:
    with pytest.raises(ConfigError, match="mappedFileSizeCommitLog"):
        from_properties(StoreConfig, {"mappedFileSizeCommitLog": "4096", "maxMessageSize": "4096"})
    from_properties(StoreConfig, {"mappedFileSizeCommitLog": "4097", "maxMessageSize": "4096"})


# --- properties files ---------------------------------------------------------------------

PROPERTIES_TEXT = r"""
# a comment
! another comment
   # an indented comment
brokerClusterName = DefaultCluster
brokerName:broker-a
brokerId 0
listenPort=10911
empty=
alone
spaced   =   value with spaces
colon : first:second
equals=a=b
multi = one \
        two \
    three
notContinued = ends with two backslashes \\
tabbed=\tindented\n
unicode=caf\u00e9 \u4e2d
key\ with\ spaces = yes
key\=with\:seps = ok
brokerId = 1
"""
# Lines whose trailing blanks matter, kept out of the raw string above.
PROPERTIES_TEXT = PROPERTIES_TEXT.replace(
    "brokerId = 1\n", "escapedBlank=keep\\ \ntrailing = blanks   \nbrokerId = 1\n"
)


def test_properties_parsing() -> None:
    props = parse_properties(PROPERTIES_TEXT)
    assert props == {
        "brokerClusterName": "DefaultCluster",
        "brokerName": "broker-a",
        "brokerId": "1",  # the later line wins
        "listenPort": "10911",
        "empty": "",
        "alone": "",
        "spaced": "value with spaces",
        "colon": "first:second",
        "equals": "a=b",
        "multi": "one two three",
        "notContinued": "ends with two backslashes \\",
        "tabbed": "\tindented\n",
        "escapedBlank": "keep ",
        "unicode": "caf\u00e9 \u4e2d",
        "key with spaces": "yes",
        "key=with:seps": "ok",
        "trailing": "blanks",
    }


def test_properties_continuation_at_end_of_file_and_crlf() -> None:
    assert parse_properties("a=1\r\nb=2 \\\r\n  3\r\n") == {"a": "1", "b": "2 3"}
    assert parse_properties("last=x \\") == {"last": "x"}  # a trailing blank is dropped
    assert parse_properties("# comment \\\nkey=v") == {"key": "v"}


def test_bad_unicode_escape_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="escape"):
        parse_properties("k=\\uZZZZ")


def test_load_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("maxMessageSize=8192\nbrokerRole = SLAVE\n", encoding="utf-8")
    config = from_properties(StoreConfig, load_properties(path))
    assert (config.max_message_size, config.broker_role) == (8192, BrokerRole.SLAVE)
    missing = tmp_path / "missing.conf"
    with pytest.raises(ConfigError) as info:
        load_properties(missing)
    assert str(missing) in str(info.value)


# --- command-line overrides ---------------------------------------------------------------


def test_command_line_overrides() -> None:
    assert parse_overrides(["a=1", " b = two words ", "c=x=y", "d="]) == {
        "a": "1",
        "b": "two words",
        "c": "x=y",
        "d": "",
    }
    for bad in (["novalue"], ["=x"], [" =x"]):
        with pytest.raises(ConfigError) as info:
            parse_overrides(bad)
        assert bad[0] in str(info.value)


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("maxMessageSize=8192\nflushDiskType=SYNC_FLUSH\n", encoding="utf-8")
    props = load_properties(path) | parse_overrides(["maxMessageSize=2048", "fileReservedTime=1"])
    config = from_properties(StoreConfig, props)
    assert config.max_message_size == 2048
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.file_reserved_time == 1
    with pytest.raises(ConfigError, match="fileReservedTime"):
        from_properties(StoreConfig, props | parse_overrides(["fileReservedTime=soon"]))


def test_fixed_values_bypass_the_file() -> None:
    config = from_properties(StoreConfig, {"maxMessageSize": "x"}, max_message_size=2048)
    assert config.max_message_size == 2048
    assert dataclasses.replace(config, max_message_size=4096).max_message_size == 4096


def test_disk_use_is_counted_as_df_and_rocketmq_count_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # 1000 blocks: 100 used, 300 reserved for root, 600 free for us -> 100 / (100 + 600)
    usage = shutil._ntuple_diskusage(1000, 100, 600)  # type: ignore[attr-defined]
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: usage)
    assert disk_used_ratio(tmp_path) == pytest.approx(100 / 700)
