"""The broker's tables: topics, subscription groups, consume and delay offsets (persisted as
RocketMQ's JSON config files under `<storePathRootDir>/config/`), and the live producers and
consumers (soft state from heartbeats). Pure Python, no I/O but the config files."""

from tidemq.broker.managers.clients import (
    Channel,
    ClientChannelInfo,
    ConsumerGroupInfo,
    ConsumerManager,
    ExpiredChannel,
    ProducerManager,
)
from tidemq.broker.managers.config_file import ConfigFileCorruptError, config_dir
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager, OffsetMergeResult
from tidemq.broker.managers.delay_offset import DelayOffsetTable
from tidemq.broker.managers.subscription_group import SubscriptionGroupManager
from tidemq.broker.managers.topic_config import (
    TopicChange,
    TopicConfigChanged,
    TopicConfigManager,
    validate_topic_name,
)

__all__ = [
    "Channel",
    "ClientChannelInfo",
    "ConfigFileCorruptError",
    "ConsumerGroupInfo",
    "ConsumerManager",
    "ConsumerOffsetManager",
    "DelayOffsetTable",
    "ExpiredChannel",
    "OffsetMergeResult",
    "ProducerManager",
    "SubscriptionGroupManager",
    "TopicChange",
    "TopicConfigChanged",
    "TopicConfigManager",
    "config_dir",
    "validate_topic_name",
]
