"""Live producers and consumers, as RocketMQ's ConsumerManager, ConsumerGroupInfo and
ProducerManager keep them (soft state rebuilt from heartbeats; nothing is persisted).

A client connection is an opaque hashable `Channel` (the broker passes its RemotingConnection);
per group each channel maps to a `ClientChannelInfo` (client id, language, version, time of its
last heartbeat). Clients heartbeat every 30 s; a channel silent for 120 s is dropped by the
broker's scan, and a closed connection is dropped at once.

Consumer membership changes are announced through the `notifier(group, channels)` callback,
which the broker turns into NOTIFY_CONSUMER_IDS_CHANGED (40) to every channel of the group so
that they rebalance at once. As in RocketMQ 4.9.7 the notifier runs when a heartbeat brings a
new channel, or adds or drops a subscribed topic (a changed expression on the same topic is
stored without a notification: queue allocation does not depend on it), when a client
unregisters, and when a channel closes; it does not run when the idle scan expires a channel.
Register and unregister notify only if the group allows it (its subscription group config)
and the broker does (notifyConsumerIdsChangedEnable); a channel close only needs the broker's.

Beyond RocketMQ: two channels of one consumer group that present the same client id are logged
as a warning, because the clients would compute the same queue share (apache/rocketmq#667).

Both managers also keep, per channel, the groups it is in (`_groups_of`), so that a closed
connection costs the groups it was in, not a look at every group: RocketMQ walks every group
per closed channel, which with 10,000 clients of 1,000 groups reconnecting is ten million steps.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

from tidemq.client.protocol.heartbeat import (
    Connection,
    ConsumeFromWhere,
    ConsumerConnection,
    ConsumeType,
    MessageModel,
    ProducerConnection,
    SubscriptionData,
)

__all__ = [
    "CHANNEL_EXPIRED_TIMEOUT_MS",
    "Channel",
    "ClientChannelInfo",
    "ConsumerGroupInfo",
    "ConsumerIdsChangedNotifier",
    "ConsumerManager",
    "ExpiredChannel",
    "ProducerManager",
]

log = logging.getLogger(__name__)

CHANNEL_EXPIRED_TIMEOUT_MS: Final = 120_000


class Channel(Protocol):
    """A client connection: hashable, with the peer's `host:port` for logs and admin views."""

    @property
    def peer(self) -> str: ...


def monotonic_ms() -> float:
    return time.monotonic() * 1000.0


Clock = Callable[[], float]
ConsumerIdsChangedNotifier = Callable[[str, list[Channel]], None]


@dataclass(slots=True)
class ClientChannelInfo:
    """One client's connection as registered by its heartbeat; `language` is a LanguageCode name.

    `last_update` is in milliseconds of the manager's clock (monotonic by default).
    """

    channel: Channel
    client_id: str
    language: str = "JAVA"
    version: int = 0
    last_update: float = 0.0

    def connection(self) -> Connection:
        return Connection(self.client_id, self.channel.peer, self.language, self.version)


@dataclass(frozen=True, slots=True)
class ExpiredChannel:
    """A channel the idle scan removed from a group; the broker should close `info.channel`."""

    group: str
    info: ClientChannelInfo


@dataclass(slots=True)
class ConsumerGroupInfo:
    """The live members of one consumer group and the subscriptions they last announced."""

    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    channels: dict[Channel, ClientChannelInfo] = field(default_factory=dict)
    last_update: float = 0.0

    def find_channel(self, client_id: str) -> ClientChannelInfo | None:
        return next((i for i in self.channels.values() if i.client_id == client_id), None)

    def all_channels(self) -> list[Channel]:
        return list(self.channels)

    def all_client_ids(self) -> list[str]:
        """In channel registration order, as RocketMQ's map order; clients sort the list."""
        return [info.client_id for info in self.channels.values()]

    def find_subscription(self, topic: str) -> SubscriptionData | None:
        return self.subscriptions.get(topic)

    def update_channel(
        self,
        info: ClientChannelInfo,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        now: float,
    ) -> bool:
        """Record a heartbeat from `info.channel`; True when the channel is new to the group."""
        self.consume_type = consume_type
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.last_update = now
        old = self.channels.get(info.channel)
        if old is not None and old.client_id == info.client_id:
            old.last_update = now
            return False
        info.last_update = now
        self.channels[info.channel] = info
        if old is None:
            log.info(
                "new consumer connected: group=%s %s %s client=%s addr=%s",
                self.group_name,
                consume_type.value,
                message_model.value,
                info.client_id,
                info.channel.peer,
            )
        else:
            # RocketMQ logs this as "[BUG]": one connection, a different client id.
            log.error(
                "consumer channel %s of group %s changed its client id from %s to %s",
                info.channel.peer,
                self.group_name,
                old.client_id,
                info.client_id,
            )
        self._warn_duplicate_client_id(info)
        return old is None

    def _warn_duplicate_client_id(self, info: ClientChannelInfo) -> None:
        others = [
            i.channel.peer
            for ch, i in self.channels.items()
            if ch is not info.channel and i.client_id == info.client_id
        ]
        if others:
            log.warning(
                "consumer group %s: client id %s is used by %s and by %s; these consumers "
                "will take the same share of queues, so some queues are consumed twice and "
                "others not at all. Give each consumer a distinct instanceName",
                self.group_name,
                info.client_id,
                info.channel.peer,
                ", ".join(others),
            )

    def update_subscriptions(self, subscriptions: Iterable[SubscriptionData], now: float) -> bool:
        """Take the announced subscriptions; True when a topic was added or dropped.

        A newer `subVersion` for a known topic replaces its expression without counting as a
        change, as in RocketMQ.
        """
        announced = {s.topic: s for s in subscriptions}
        changed = False
        for topic, sub in announced.items():
            old = self.subscriptions.get(topic)
            if old is None:
                log.info("group %s subscribes to a new topic: %s", self.group_name, sub)
                changed = True
            elif sub.sub_version > old.sub_version:
                if self.consume_type is ConsumeType.CONSUME_PASSIVELY:
                    log.info("group %s subscription changed: %s -> %s", self.group_name, old, sub)
            else:
                continue
            self.subscriptions[topic] = sub
        for topic in [t for t in self.subscriptions if t not in announced]:
            log.warning("group %s no longer subscribes to %s", self.group_name, topic)
            del self.subscriptions[topic]
            changed = True
        self.last_update = now
        return changed

    def remove_channel(self, channel: Channel) -> ClientChannelInfo | None:
        return self.channels.pop(channel, None)

    def consumer_connection(self) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST's body for this group."""
        return ConsumerConnection(
            connections=[i.connection() for i in self.channels.values()],
            subscriptions=dict(self.subscriptions),
            consume_type=self.consume_type,
            message_model=self.message_model,
            consume_from_where=self.consume_from_where,
        )


class ConsumerManager:
    """Consumer groups by name. Not thread safe: use it from the event loop only."""

    def __init__(
        self,
        notifier: ConsumerIdsChangedNotifier | None = None,
        *,
        notify_enabled: bool = True,
        clock: Clock = monotonic_ms,
    ) -> None:
        self._groups: dict[str, ConsumerGroupInfo] = {}
        # channel -> the groups it is a member of (insertion-ordered; module docstring)
        self._groups_of: dict[Channel, dict[str, None]] = {}
        self._notifier = notifier
        self._notify_enabled = notify_enabled
        self._clock = clock

    # --- queries --------------------------------------------------------------------------

    def get_group_info(self, group: str) -> ConsumerGroupInfo | None:
        return self._groups.get(group)

    def groups(self) -> list[str]:
        return list(self._groups)

    def find_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self._groups.get(group)
        return info.find_subscription(topic) if info is not None else None

    def find_channel(self, group: str, client_id: str) -> ClientChannelInfo | None:
        info = self._groups.get(group)
        return info.find_channel(client_id) if info is not None else None

    def get_all_client_ids(self, group: str) -> list[str]:
        info = self._groups.get(group)
        return info.all_client_ids() if info is not None else []

    def groups_of_topic(self, topic: str) -> set[str]:
        """queryTopicConsumeByWho: the online groups subscribed to `topic`."""
        return {g for g, info in self._groups.items() if topic in info.subscriptions}

    def consumer_connection(self, group: str) -> ConsumerConnection | None:
        info = self._groups.get(group)
        return info.consumer_connection() if info is not None else None

    # --- changes --------------------------------------------------------------------------

    def register_consumer(
        self,
        group: str,
        info: ClientChannelInfo,
        consume_type: ConsumeType,
        message_model: MessageModel,
        consume_from_where: ConsumeFromWhere,
        subscriptions: Iterable[SubscriptionData],
        is_notify: bool,
    ) -> bool:
        """Record one consumer group of a heartbeat; True when membership or topics changed."""
        now = self._clock()
        group_info = self._groups.get(group)
        if group_info is None:
            group_info = ConsumerGroupInfo(group, consume_type, message_model, consume_from_where)
            self._groups[group] = group_info
        new_channel = group_info.update_channel(
            info, consume_type, message_model, consume_from_where, now
        )
        if new_channel:
            self._groups_of.setdefault(info.channel, {})[group] = None
        new_topics = group_info.update_subscriptions(subscriptions, now)
        changed = new_channel or new_topics
        if changed and is_notify:
            self._notify(group, group_info)
        return changed

    def unregister_consumer(self, group: str, channel: Channel, is_notify: bool) -> bool:
        """UNREGISTER_CLIENT: drop `channel` from the group; False when it was not a member."""
        group_info = self._groups.get(group)
        if group_info is None:
            return False
        removed = group_info.remove_channel(channel)
        if removed is None:
            return False
        _forget_group(self._groups_of, channel, group)
        log.info("consumer unregistered: group=%s client=%s", group, removed.client_id)
        self._drop_if_empty(group, group_info)
        if is_notify:
            self._notify(group, group_info)
        return True

    def do_channel_close_event(self, channel: Channel) -> list[str]:
        """A connection closed: drop it from every group; returns the groups it was in."""
        affected = []
        for group in self._groups_of.pop(channel, {}):
            group_info = self._groups.get(group)
            if group_info is None:
                continue
            removed = group_info.remove_channel(channel)
            if removed is None:
                continue
            log.warning(
                "consumer channel %s closed: removed client %s from group %s",
                channel.peer,
                removed.client_id,
                group,
            )
            affected.append(group)
            self._drop_if_empty(group, group_info)
            self._notify(group, group_info)
        return affected

    def scan_not_active(
        self, now: float | None = None, expiry_ms: float = CHANNEL_EXPIRED_TIMEOUT_MS
    ) -> list[ExpiredChannel]:
        """Drop channels with no heartbeat for `expiry_ms`; the caller closes them.

        No notification is sent, as in RocketMQ: the remaining members learn of the change at
        their next periodic rebalance (20 s).
        """
        now = self._clock() if now is None else now
        expired = []
        for group, group_info in list(self._groups.items()):
            for channel, info in list(group_info.channels.items()):
                if now - info.last_update > expiry_ms:
                    del group_info.channels[channel]
                    _forget_group(self._groups_of, channel, group)
                    expired.append(ExpiredChannel(group, info))
                    log.warning(
                        "SCAN: removed consumer %s (%s) of group %s: no heartbeat for %.0f ms",
                        info.client_id,
                        channel.peer,
                        group,
                        now - info.last_update,
                    )
            self._drop_if_empty(group, group_info)
        return expired

    def _drop_if_empty(self, group: str, group_info: ConsumerGroupInfo) -> None:
        if not group_info.channels and self._groups.get(group) is group_info:
            del self._groups[group]
            log.info("consumer group %s has no connection left: removed", group)

    def _notify(self, group: str, group_info: ConsumerGroupInfo) -> None:
        channels = group_info.all_channels()
        if self._notify_enabled and self._notifier is not None and channels:
            self._notifier(group, channels)


def _forget_group(groups_of: dict[Channel, dict[str, None]], channel: Channel, group: str) -> None:
    groups = groups_of.get(channel)
    if groups is not None:
        groups.pop(group, None)
        if not groups:
            del groups_of[channel]


class ProducerManager:
    """Producer groups by name, and producers by client id (for transaction state checks)."""

    def __init__(self, *, clock: Clock = monotonic_ms) -> None:
        self._groups: dict[str, dict[Channel, ClientChannelInfo]] = {}
        self._by_client_id: dict[str, Channel] = {}
        self._groups_of: dict[Channel, dict[str, None]] = {}  # module docstring
        self._clock = clock
        self._round_robin = itertools.count()

    def groups(self) -> list[str]:
        return list(self._groups)

    def group_channels(self, group: str) -> dict[Channel, ClientChannelInfo]:
        return dict(self._groups.get(group, {}))

    def producer_connection(self, group: str) -> ProducerConnection | None:
        channels = self._groups.get(group)
        if channels is None:
            return None
        return ProducerConnection([i.connection() for i in channels.values()])

    def find_channel(self, client_id: str) -> Channel | None:
        return self._by_client_id.get(client_id)

    def get_available_channel(
        self, group: str, is_usable: Callable[[Channel], bool] | None = None
    ) -> Channel | None:
        """A channel of `group` in round-robin order, skipping those `is_usable` rejects;
        the next one in order when none is usable (RocketMQ returns its last pick then)."""
        channels = list(self._groups.get(group, {}))
        if not channels:
            return None
        start = next(self._round_robin) % len(channels)
        ordered = channels[start:] + channels[:start]
        if is_usable is not None:
            usable = [c for c in ordered if is_usable(c)]
            if usable:
                return usable[0]
        return ordered[0]

    def register_producer(self, group: str, info: ClientChannelInfo) -> bool:
        """Record one producer group of a heartbeat; True when the channel is new to it."""
        now = self._clock()
        channels = self._groups.setdefault(group, {})
        old = channels.get(info.channel)
        self._by_client_id[info.client_id] = info.channel
        if old is not None:
            old.last_update = now
            return False
        info.last_update = now
        channels[info.channel] = info
        self._groups_of.setdefault(info.channel, {})[group] = None
        log.info(
            "new producer connected: group=%s client=%s addr=%s",
            group,
            info.client_id,
            info.channel.peer,
        )
        return True

    def unregister_producer(self, group: str, channel: Channel) -> bool:
        channels = self._groups.get(group)
        removed = channels.pop(channel, None) if channels is not None else None
        if removed is None:
            return False
        _forget_group(self._groups_of, channel, group)
        self._forget(removed)
        log.info("producer unregistered: group=%s client=%s", group, removed.client_id)
        self._drop_if_empty(group)
        return True

    def do_channel_close_event(self, channel: Channel) -> list[str]:
        affected = []
        for group in self._groups_of.pop(channel, {}):
            channels = self._groups.get(group)
            if channels is None:
                continue
            removed = channels.pop(channel, None)
            if removed is None:
                continue
            self._forget(removed)
            log.info(
                "producer channel %s closed: removed client %s from group %s",
                channel.peer,
                removed.client_id,
                group,
            )
            affected.append(group)
            self._drop_if_empty(group)
        return affected

    def scan_not_active(
        self, now: float | None = None, expiry_ms: float = CHANNEL_EXPIRED_TIMEOUT_MS
    ) -> list[ExpiredChannel]:
        now = self._clock() if now is None else now
        expired = []
        for group, channels in list(self._groups.items()):
            for channel, info in list(channels.items()):
                if now - info.last_update > expiry_ms:
                    del channels[channel]
                    _forget_group(self._groups_of, channel, group)
                    self._forget(info)
                    expired.append(ExpiredChannel(group, info))
                    log.warning(
                        "SCAN: removed producer %s (%s) of group %s: no heartbeat for %.0f ms",
                        info.client_id,
                        channel.peer,
                        group,
                        now - info.last_update,
                    )
            self._drop_if_empty(group)
        return expired

    def _forget(self, info: ClientChannelInfo) -> None:
        # Only if the id still points at this channel: a reconnected client re-registered it.
        if self._by_client_id.get(info.client_id) is info.channel:
            del self._by_client_id[info.client_id]

    def _drop_if_empty(self, group: str) -> None:
        if group in self._groups and not self._groups[group]:
            del self._groups[group]
            log.info("producer group %s has no connection left: removed", group)
