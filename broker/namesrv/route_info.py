"""The name server's routing tables (RocketMQ's RouteInfoManager), pure logic: no I/O, no clock.

Tables, as in RocketMQ 4.9.7 `RouteInfoManager`::

    topic_queue_table   topic       -> {brokerName -> QueueData}   (queues a broker group serves)
    broker_addr_table   brokerName  -> BrokerData{cluster, brokerName, brokerAddrs{id -> addr}}
    cluster_addr_table  clusterName -> {brokerName}
    broker_live_table   brokerAddr  -> BrokerLiveInfo{last_update, data_version, connection,
                                                      ha_server_addr}
    filter_server_table brokerAddr  -> [filter server addr]

Time is milliseconds from the injected `clock` (wall time by default); `connection` is whatever
object the caller uses for a broker's connection, compared by identity.

A topic's `{brokerName -> QueueData}` is shared by the topics that have the same one (a broker's
million topics hold a handful), so values of `topic_queue_table` and the QueueData in them are
never changed in place: a change puts a new mapping for that topic (typed `Mapping` so that mypy
refuses an assignment into one).

Every method that removes brokers returns `BrokerRemoved` records, so that the caller can log
them and close connections; this module never logs or touches a socket.

Queue data belongs to a broker *group* (brokerName), not to one address: it is taken from the
master's registrations only, and removed when the group's last address goes (connection closed,
expired, unregistered). While a slave is left alone its group keeps its queue data, so consumers
can still read from it; producers skip it because the group has no brokerId 0.

Besides RocketMQ's full registration, a broker may send (client/protocol/namesrv.py):

- an incremental registration (`register_increment`): the topics changed since a base version,
  applied only when that is the version held for the address; else nothing is applied and the
  outcome asks for a full registration. Its cost is that of the changed topics alone.
- a full registration split in parts (`register_broker(..., split=(index, count))`): each part's
  topics are applied as they come; the address's version is held as "incomplete" until the last
  part, so an incremental registration in between asks for a full one again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from tidemq.client.protocol.models import (
    MASTER_ID,
    PERM_READ,
    PERM_WRITE,
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from tidemq.client.protocol.namesrv import QueueCounts, TopicList

__all__ = [
    "DEFAULT_BROKER_CHANNEL_EXPIRED_TIME",
    "BrokerLiveInfo",
    "BrokerRemoved",
    "RegisterOutcome",
    "RemovalReason",
    "RouteInfoManager",
]

DEFAULT_BROKER_CHANNEL_EXPIRED_TIME: Final = 120_000

# The version held for an address whose split full registration has not ended: no broker's.
INCOMPLETE_VERSION: Final = DataVersion(timestamp=0, counter=-1)

# Distinct QueueData values kept for sharing (`_put_queue_data`); past this many (queue counts
# all different) the cache starts again, which only costs sharing.
_MAX_SHARED_QUEUE_DATAS: Final = 4096

# TopicSysFlag bits (RocketMQ `TopicSysFlag`): unit topics and topics with unit subscriptions.
_FLAG_UNIT: Final = 0x1
_FLAG_UNIT_SUB: Final = 0x2


def _counts(config: TopicConfig) -> QueueCounts:
    return (config.read_queue_nums, config.write_queue_nums, config.perm, config.topic_sys_flag)


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class RemovalReason:
    """Why a broker address left the tables (the text of `BrokerRemoved.reason`)."""

    CONNECTION_CLOSED: Final = "connection closed"
    UNREGISTERED: Final = "unregistered"

    @staticmethod
    def expired(silent_ms: int) -> str:
        return f"expired: no registration for {silent_ms} ms"


@dataclass(slots=True)
class BrokerLiveInfo:
    last_update_timestamp: int
    data_version: DataVersion
    connection: object
    ha_server_addr: str


@dataclass(frozen=True, slots=True)
class RegisterOutcome:
    """What a registration did. `ha_server_addr`/`master_addr` are set for a slave whose master is
    registered and alive; `new_broker` when the address had no live entry before;
    `topics_updated` when its queue data was (re)built from this registration."""

    ha_server_addr: str | None
    master_addr: str | None
    new_broker: bool
    topics_updated: bool
    # Set when the registration was ignored: a master with an epoch below this one, the
    # highest registered for its broker name (a deposed master that came back).
    stale_against: int | None = None
    # An incremental registration not applied: the broker must send a full one.
    full_registration_needed: bool = False


@dataclass(frozen=True, slots=True)
class BrokerRemoved:
    """One broker address removed; `group_removed` when it was its group's last address (the
    group's queue data went with it). `connection` is the one it registered through, if known."""

    broker_addr: str
    broker_name: str | None
    cluster_name: str | None
    broker_id: int | None
    reason: str
    group_removed: bool
    connection: object = None


class RouteInfoManager:
    def __init__(
        self,
        *,
        broker_channel_expired_time: int = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME,
        clock: Callable[[], int] = _wall_clock_ms,
        delete_topic_with_broker_registration: bool = False,
    ) -> None:
        """`delete_topic_with_broker_registration` is RocketMQ 5.x's namesrv option (off by
        default there, absent in 4.9.7): when the master's changed topic table no longer has a
        topic, the group's queue data for it is dropped instead of lingering until the group
        goes away or the topic is deleted explicitly."""
        self.broker_channel_expired_time = broker_channel_expired_time
        self.clock = clock
        self.delete_topic_with_broker_registration = delete_topic_with_broker_registration
        self.topic_queue_table: dict[str, Mapping[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLiveInfo] = {}
        self.filter_server_table: dict[str, list[str]] = {}
        # Controller mode: brokerName -> the highest epoch a master of it registered with. Kept
        # when the group's addresses go: a deposed master must not win by outliving the others.
        self.master_epoch_table: dict[str, int] = {}
        # brokerAddr -> the topics of a split registration's parts so far (only with
        # delete_topic_with_broker_registration, which needs the whole table).
        self._split_topics: dict[str, set[str]] = {}
        # (brokerName, *QueueCounts) -> (its QueueData, {brokerName: that QueueData})
        self._queue_datas: dict[
            tuple[str, int, int, int, int], tuple[QueueData, Mapping[str, QueueData]]
        ] = {}

    # --- registration ---------------------------------------------------------------------

    def register_broker(
        self,
        *,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: list[str] | None,
        connection: object,
        master_epoch: int | None = None,
        split: tuple[int, int] | None = None,
        topic_queue_rows: Sequence[tuple[QueueCounts, list[str]]] = (),
    ) -> RegisterOutcome:
        """`split`: (index, count) of one part of a split full registration.
        `topic_queue_rows`: more topics of the wrapper's table, read without a TopicConfig
        (`RegisterBrokerBody.decode_routes`).
        `master_epoch`: an elected master's epoch (controller mode). The name server keeps
        the registration with the highest epoch for a broker name: a master registering with a
        lower one is ignored (its outcome says so), a higher one replaces the group's master."""
        stale = self._stale_epoch(broker_name, broker_id, master_epoch)
        if stale is not None:
            return RegisterOutcome(None, None, False, False, stale_against=stale)
        broker_data, register_first = self._join_group(
            cluster_name, broker_name, broker_id, broker_addr
        )
        version = (
            topic_config_wrapper.data_version
            if topic_config_wrapper is not None
            else DataVersion(timestamp=0, counter=0)
        )
        topics_updated = False
        # Queue data is the group's, so only the master's table counts, and only when it changed
        # (a part of a split registration always counts: its topics are not all there yet).
        if (
            topic_config_wrapper is not None
            and broker_id == MASTER_ID
            and (
                split is not None
                or register_first
                or self.is_topic_config_changed(broker_addr, version)
            )
        ):
            self._update_queue_datas(
                broker_name, broker_addr, topic_config_wrapper, split, topic_queue_rows
            )
            topics_updated = True
        if split is not None and split[0] < split[1] - 1:
            version = INCOMPLETE_VERSION

        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(
            self.clock(), version, connection, ha_server_addr
        )
        if filter_server_list is not None:
            if filter_server_list:
                self.filter_server_table[broker_addr] = list(filter_server_list)
            else:
                self.filter_server_table.pop(broker_addr, None)

        ha_addr, master_addr = self._master_of(broker_data, broker_id)
        return RegisterOutcome(ha_addr, master_addr, previous is None, topics_updated)

    def register_increment(
        self,
        *,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        base_version: DataVersion,
        topic_config_wrapper: TopicConfigSerializeWrapper,
        deleted_topics: Iterable[str],
        connection: object,
        master_epoch: int | None = None,
        topic_queue_rows: Sequence[tuple[QueueCounts, list[str]]] = (),
    ) -> RegisterOutcome:
        """The topics changed since `base_version` (module docstring): applied, and the
        address's version moved to the wrapper's, only when `base_version` is the one held.
        `topic_queue_rows`: more changed topics, as in `register_broker`."""
        live = self.broker_live_table.get(broker_addr)
        if live is None or live.data_version != base_version:
            return RegisterOutcome(None, None, False, False, full_registration_needed=True)
        stale = self._stale_epoch(broker_name, broker_id, master_epoch)
        if stale is not None:
            return RegisterOutcome(None, None, False, False, stale_against=stale)
        broker_data, _first = self._join_group(cluster_name, broker_name, broker_id, broker_addr)
        changed = topic_config_wrapper.topic_config_table
        deleted = list(deleted_topics)
        if broker_id == MASTER_ID:
            for key, config in changed.items():
                self._put_queue_data(broker_name, config.topic_name or key, _counts(config))
            for counts, topics in topic_queue_rows:
                self._put_queue_datas(broker_name, topics, counts)
            self._remove_group_from_topics(broker_name, deleted)
        live.last_update_timestamp = self.clock()
        live.data_version = topic_config_wrapper.data_version
        live.connection = connection
        live.ha_server_addr = ha_server_addr
        ha_addr, master_addr = self._master_of(broker_data, broker_id)
        updated = broker_id == MASTER_ID and bool(changed or topic_queue_rows or deleted)
        return RegisterOutcome(ha_addr, master_addr, False, updated)

    def _stale_epoch(
        self, broker_name: str, broker_id: int, master_epoch: int | None
    ) -> int | None:
        """The higher epoch a master registration of `master_epoch` loses to; None when it
        may register (and its epoch is then the highest)."""
        if broker_id == MASTER_ID and master_epoch is not None:
            known = self.master_epoch_table.get(broker_name, 0)
            if master_epoch < known:
                return known
            self.master_epoch_table[broker_name] = master_epoch
        return None

    def _join_group(
        self, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str
    ) -> tuple[BrokerData, bool]:
        """Put the address in its group and cluster; True when the group or this id is new."""
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            broker_data = BrokerData(cluster_name, broker_name, {})
            self.broker_addr_table[broker_name] = broker_data
        addrs = broker_data.broker_addrs
        # One address holds one id: a slave promoted to master re-registers as id 0 from the
        # same address, and its old id must not linger as a second member.
        for other_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[other_id]
        first = broker_id not in addrs
        addrs[broker_id] = broker_addr
        return broker_data, first

    def _master_of(self, broker_data: BrokerData, broker_id: int) -> tuple[str | None, str | None]:
        """For a slave: its live master's HA address and broker address."""
        if broker_id == MASTER_ID:
            return None, None
        master_addr = broker_data.broker_addrs.get(MASTER_ID)
        live = None if master_addr is None else self.broker_live_table.get(master_addr)
        if live is None:
            return None, None
        return live.ha_server_addr, master_addr

    def _update_queue_datas(
        self,
        broker_name: str,
        broker_addr: str,
        wrapper: TopicConfigSerializeWrapper,
        split: tuple[int, int] | None,
        rows: Sequence[tuple[QueueCounts, list[str]]],
    ) -> None:
        table = wrapper.topic_config_table
        for key, config in table.items():
            self._put_queue_data(broker_name, config.topic_name or key, _counts(config))
        for counts, topics in rows:
            self._put_queue_datas(broker_name, topics, counts)
        if not self.delete_topic_with_broker_registration:
            return
        present = {config.topic_name or key for key, config in table.items()}
        for _, topics in rows:
            present.update(topics)
        if split is not None:  # the table is the union of the parts: gather until the last
            index, count = split
            seen = set() if index == 0 else self._split_topics.get(broker_addr, set())
            seen |= present
            if index < count - 1:
                self._split_topics[broker_addr] = seen
                return
            self._split_topics.pop(broker_addr, None)
            present = seen
        gone = [t for t, q in self.topic_queue_table.items() if broker_name in q]
        self._remove_group_from_topics(broker_name, (t for t in gone if t not in present))

    def _put_queue_data(self, broker_name: str, topic: str, counts: QueueCounts) -> None:
        self._put_queue_datas(broker_name, (topic,), counts)

    def _put_queue_datas(
        self, broker_name: str, topics: Collection[str], counts: QueueCounts
    ) -> None:
        # One QueueData per distinct value, and one {brokerName: QueueData} for the topics
        # served by that group alone, shared by every topic that has it (a broker's topics
        # mostly have the same few): a million topics make a handful of objects, not a million
        # (the garbage collector has that many fewer to walk), and a part of new topics goes
        # into the table in one C-level update. Shared values are never changed in place
        # (module docstring).
        key = (broker_name, *counts)
        shared = self._queue_datas.get(key)
        if shared is None:
            if len(self._queue_datas) >= _MAX_SHARED_QUEUE_DATAS:
                self._queue_datas.clear()
            queue_data = QueueData(broker_name, *counts)
            shared = self._queue_datas[key] = (queue_data, {broker_name: queue_data})
        queue_data, alone = shared
        table = self.topic_queue_table
        if len(topics) > 1 and table.keys().isdisjoint(topics):
            table.update(dict.fromkeys(topics, alone))
            return
        for topic in topics:
            queues = table.get(topic)
            if queues is None or (len(queues) == 1 and broker_name in queues):
                table[topic] = alone
            else:
                table[topic] = {**queues, broker_name: queue_data}

    def is_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        """True unless the address's last registration carried exactly this data version."""
        previous = self.query_data_version(broker_addr)
        return previous is None or previous != data_version

    def query_data_version(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return None if live is None else live.data_version

    def touch(self, broker_addr: str) -> None:
        """Count a QUERY_DATA_VERSION that found nothing changed as a sign of life."""
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_timestamp = self.clock()

    # --- removal --------------------------------------------------------------------------

    def unregister_broker(
        self, *, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> BrokerRemoved | None:
        """A broker's goodbye; None when that id of that group is not at that address (a late
        goodbye must not remove whoever has taken the id since)."""
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None or broker_data.broker_addrs.get(broker_id) != broker_addr:
            return None
        # The address leaves every group it is in, as on a closed connection: its live entry goes,
        # and an address listed without one could never expire.
        return self._remove_addr(broker_addr, RemovalReason.UNREGISTERED)

    def on_connection_destroyed(self, connection: object) -> list[BrokerRemoved]:
        """Forget at once every broker address that registered through `connection`."""
        addrs = [a for a, live in self.broker_live_table.items() if live.connection is connection]
        return [self._remove_addr(a, RemovalReason.CONNECTION_CLOSED) for a in addrs]

    def scan_not_active_brokers(self, now: int | None = None) -> list[BrokerRemoved]:
        """Remove addresses whose last registration is older than the expiry time. The caller
        closes the connections of the removed ones, as RocketMQ does."""
        now = self.clock() if now is None else now
        expired = [
            (addr, now - live.last_update_timestamp)
            for addr, live in self.broker_live_table.items()
            if live.last_update_timestamp + self.broker_channel_expired_time < now
        ]
        return [self._remove_addr(addr, RemovalReason.expired(ms)) for addr, ms in expired]

    def _remove_addr(self, broker_addr: str, reason: str) -> BrokerRemoved:
        live = self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        found: tuple[str, str, int] | None = None
        group_removed = False
        for name, broker_data in list(self.broker_addr_table.items()):
            ids = [i for i, a in broker_data.broker_addrs.items() if a == broker_addr]
            if not ids:
                continue
            for broker_id in ids:
                del broker_data.broker_addrs[broker_id]
            found = found or (name, broker_data.cluster, ids[0])
            if not broker_data.broker_addrs:
                self._drop_group(name)
                group_removed = True
        return BrokerRemoved(
            broker_addr,
            found[0] if found else None,
            found[1] if found else None,
            found[2] if found else None,
            reason,
            group_removed,
            None if live is None else live.connection,
        )

    def _drop_group(self, broker_name: str) -> None:
        """A group without members: out of the address table, every cluster and every topic."""
        self.broker_addr_table.pop(broker_name, None)
        for cluster, names in list(self.cluster_addr_table.items()):
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster]
        self._remove_group_from_topics(broker_name, list(self.topic_queue_table))

    def _remove_group_from_topics(self, broker_name: str, topics: Iterable[str]) -> None:
        table = self.topic_queue_table
        for topic in list(topics):
            queues = table.get(topic)
            if queues is None or broker_name not in queues:
                continue
            if len(queues) == 1:
                del table[topic]
            else:
                table[topic] = {name: q for name, q in queues.items() if name != broker_name}

    # --- topics ---------------------------------------------------------------------------

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> bool:
        """Forget a topic's queue data, everywhere or only on `cluster_name`'s groups. True when
        something was removed."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return False
        if cluster_name is None:
            del self.topic_queue_table[topic]
            return True
        names = self.cluster_addr_table.get(cluster_name, set())
        if names.isdisjoint(queues):
            return False
        left = {name: q for name, q in queues.items() if name not in names}
        if left:
            self.topic_queue_table[topic] = left
        else:
            del self.topic_queue_table[topic]
        return True

    def wipe_write_perm(self, broker_name: str) -> int:
        """Take write permission off every topic of a group (drain it); returns the topic count."""
        return self._set_perm(broker_name, lambda perm: perm & ~PERM_WRITE)

    def add_write_perm(self, broker_name: str) -> int:
        """Give a group's topics read and write permission back; returns the topic count."""
        return self._set_perm(broker_name, lambda _perm: PERM_READ | PERM_WRITE)

    def _set_perm(self, broker_name: str, change: Callable[[int], int]) -> int:
        count = 0
        table = self.topic_queue_table
        # old value's id -> (the old value, kept alive so that its id stays its own; the new
        # one): topics that shared a value share its replacement
        replaced: dict[int, tuple[Mapping[str, QueueData], Mapping[str, QueueData]]] = {}
        for topic, queues in table.items():
            queue_data = queues.get(broker_name)
            if queue_data is None:
                continue
            done = replaced.get(id(queues))
            if done is None:  # shared with other topics: replaced, not changed
                changed = dataclasses.replace(queue_data, perm=change(queue_data.perm))
                done = replaced[id(queues)] = (queues, {**queues, broker_name: changed})
            table[topic] = done[1]  # an existing key: the table's size does not change
            count += 1
        return count

    # --- queries --------------------------------------------------------------------------

    def get_route(self, topic: str) -> TopicRouteData | None:
        """The topic's route (copies), or None unless both its queue and broker data exist."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        broker_datas = [
            BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs))
            for name in queues
            if (b := self.broker_addr_table.get(name)) is not None
        ]
        if not broker_datas:
            return None
        filter_servers = {
            addr: list(self.filter_server_table[addr])
            for b in broker_datas
            for addr in b.broker_addrs.values()
            if addr in self.filter_server_table
        }
        return TopicRouteData(
            queue_datas=[dataclasses.replace(q) for q in queues.values()],
            broker_datas=broker_datas,
            filter_server_table=filter_servers,
        )

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table={
                name: BrokerData(b.cluster, b.broker_name, dict(b.broker_addrs))
                for name, b in self.broker_addr_table.items()
            },
            cluster_addr_table={c: set(n) for c, n in self.cluster_addr_table.items()},
        )

    def all_topics(self) -> TopicList:
        return TopicList(list(self.topic_queue_table))

    def topics_by_cluster(self, cluster: str) -> TopicList:
        names = self.cluster_addr_table.get(cluster, set())
        return TopicList([t for t, q in self.topic_queue_table.items() if names & q.keys()])

    def system_topic_list(self) -> TopicList:
        """RocketMQ's answer to GET_SYSTEM_TOPIC_LIST_FROM_NS: every cluster name and broker name
        (each is also a topic a broker creates), and one broker address to ask for the rest."""
        names: list[str] = []
        for cluster, brokers in self.cluster_addr_table.items():
            names.append(cluster)
            names.extend(sorted(brokers))
        members = (b.broker_addrs for b in self.broker_addr_table.values() if b.broker_addrs)
        first = next(members, None)
        return TopicList(names, None if first is None else first[min(first)])

    def topics_with_flags(self, *, unit: bool | None, unit_sub: bool | None) -> TopicList:
        """Topics whose (first) queue data's sys flag matches; None means either."""

        def matches(flag: int) -> bool:
            return (unit is None or bool(flag & _FLAG_UNIT) == unit) and (
                unit_sub is None or bool(flag & _FLAG_UNIT_SUB) == unit_sub
            )

        return TopicList(
            [
                topic
                for topic, queues in self.topic_queue_table.items()
                if queues and matches(next(iter(queues.values())).topic_sys_flag)
            ]
        )
