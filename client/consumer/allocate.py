"""How a consumer group shares a topic's queues: RocketMQ's AllocateMessageQueueStrategy family.

Every strategy answers one question, "which of `mq_all` does `current_cid` consume?", with
`allocate(consumer_group, current_cid, mq_all, cid_all) -> list[MessageQueue]`. Each consumer of
the group asks it on its own, so the answer must be a pure function of the inputs: every consumer
sees the same sorted queue list and the same sorted client-id list and the strategies only work
if they agree. RocketMQ's RebalanceImpl sorts `mq_all` by (topic, brokerName, queueId) and
`cid_all` by string before calling; the strategies here sort (and de-duplicate) again so that a
caller that forgets cannot split the group wrongly.

| class                                 | name                  | rule                             |
|---------------------------------------|-----------------------|----------------------------------|
| AllocateMessageQueueAveragely         | AVG                   | contiguous blocks (the default)  |
| AllocateMessageQueueAveragelyByCircle | AVG_BY_CIRCLE         | round robin                      |
| AllocateMessageQueueConsistentHash    | CONSISTENT_HASH       | MD5 ring, virtual nodes          |
| AllocateMessageQueueByConfig          | CONFIG                | a fixed list                     |
| AllocateMessageQueueByMachineRoom     | MACHINE_ROOM          | brokers named "room@name"        |
| AllocateMachineRoomNearby             | MACHINE_ROOM_NEARBY-x | same room first, inner strategy x|

Inputs RocketMQ rejects with IllegalArgumentException are handled so:

- an empty `current_cid` is a caller bug: `ClientError`;
- an empty `mq_all` or `cid_all` gives nothing (logged). RocketMQ throws and its rebalance keeps
  the previous assignment; a caller that wants that must check for empty lists itself;
- a `current_cid` not in `cid_all` (the broker has not seen our heartbeat yet) gives nothing,
  logged, as in RocketMQ;
- a client id listed twice (two processes with one id, RocketMQ #667) counts once, logged: the
  twins then share one slot and consume the same queues twice, where RocketMQ gives them both the
  first slot and leaves the second slot's queues unconsumed.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from tidemq.client.errors import ClientError
from tidemq.client.protocol.heartbeat import MessageQueue

__all__ = [
    "DEFAULT_VIRTUAL_NODES",
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateStrategy",
    "MachineRoomResolver",
    "PrefixMachineRoomResolver",
    "md5_hash",
    "message_queue_key",
]

log = logging.getLogger(__name__)

DEFAULT_VIRTUAL_NODES = 10


class AllocateStrategy(Protocol):
    """RocketMQ's AllocateMessageQueueStrategy: `name` is its getName()."""

    @property
    def name(self) -> str: ...

    # Lists here so that a user's strategy declared with lists conforms; ours take any
    # Sequence.
    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: list[MessageQueue],
        cid_all: list[str],
    ) -> list[MessageQueue]: ...


def _prepare(
    consumer_group: str,
    current_cid: str,
    mq_all: Iterable[MessageQueue],
    cid_all: Iterable[str],
) -> tuple[list[MessageQueue], list[str], int] | None:
    """Sorted, de-duplicated inputs and this client's index, or None when it gets nothing."""
    if not current_cid:
        raise ClientError("current consumer id is empty")
    mqs = sorted(set(mq_all))
    cid_list = list(cid_all)
    cids = sorted(set(cid_list))
    if len(cids) != len(cid_list):
        log.warning("group %s: duplicate client ids in %s", consumer_group, cid_list)
    if not mqs or not cids:
        log.info("group %s: nothing to allocate (queues %s, clients %s)", consumer_group, mqs, cids)
        return None
    if current_cid not in cids:
        # Normal for a moment after start: the broker has not registered our heartbeat yet.
        log.info("group %s: consumer %s not in %s", consumer_group, current_cid, cids)
        return None
    return mqs, cids, cids.index(current_cid)


def averagely_range(index: int, queue_count: int, consumer_count: int) -> range:
    """Positions in the sorted queue list that consumer `index` of `consumer_count` takes.

    RocketMQ's AllocateMessageQueueAveragely: with N queues, M consumers and mod = N % M, the
    first `mod` consumers take N//M + 1 queues, the others N//M (each at least 1 while there
    are queues left), in contiguous blocks in consumer order. When N < M the last M - N
    consumers get nothing. Example, 8 queues / 3 consumers: [0,1,2] [3,4,5] [6,7].
    """
    n, m = queue_count, consumer_count
    mod = n % m
    extra = mod > 0 and index < mod
    if n <= m:
        avg = 1
    else:
        avg = n // m + 1 if extra else n // m
    start = index * avg if extra else index * avg + mod
    take = min(avg, n - start)
    return range(start, start + max(take, 0))


class AllocateMessageQueueAveragely:
    """The default: contiguous blocks of the sorted queue list (see `averagely_range`)."""

    @property
    def name(self) -> str:
        return "AVG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(consumer_group, current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, index = prepared
        # RocketMQ indexes (start + k) % N; start + k < N always holds, so a slice is the same.
        return [mqs[pos] for pos in averagely_range(index, len(mqs), len(cids))]


class AllocateMessageQueueAveragelyByCircle:
    """Round robin: consumer i takes the queues at positions j with j % M == i.

    Example, 8 queues / 3 consumers: [0,3,6] [1,4,7] [2,5].
    """

    @property
    def name(self) -> str:
        return "AVG_BY_CIRCLE"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(consumer_group, current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, index = prepared
        return mqs[index :: len(cids)]


def md5_hash(key: str) -> int:
    """RocketMQ's ConsistentHashRouter.MD5Hash: the first 4 MD5 bytes, big-endian, unsigned.

    Java hashes `key.getBytes()` in the platform charset; UTF-8 is assumed (every JVM since 18,
    and what RocketMQ deployments run with), so ASCII client ids hash the same everywhere.
    """
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def message_queue_key(mq: MessageQueue) -> str:
    """Java's MessageQueue.toString(), the key RocketMQ hashes onto the ring."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class _HashRing:
    """RocketMQ's ConsistentHashRouter: `virtual_nodes` points per client on a 32-bit ring.

    Client c's points are hash("c-0") ... hash("c-{n-1}"). A key belongs to the client owning
    the first point at or after hash(key), wrapping to the lowest point. Two points with one
    hash: the one added later wins, as with Java's TreeMap.put.
    """

    def __init__(
        self, cids: Iterable[str], virtual_nodes: int, hash_fn: Callable[[str], int]
    ) -> None:
        owners: dict[int, str] = {}
        for cid in cids:
            for replica in range(virtual_nodes):
                owners[hash_fn(f"{cid}-{replica}")] = cid
        self._points = sorted(owners)
        self._owners = owners
        self._hash = hash_fn

    def route(self, key: str) -> str | None:
        if not self._points:
            return None
        pos = bisect.bisect_left(self._points, self._hash(key))
        point = self._points[pos] if pos < len(self._points) else self._points[0]
        return self._owners[point]


class AllocateMessageQueueConsistentHash:
    """Each queue goes to the client nearest clockwise on an MD5 ring (see `_HashRing`).

    Unlike AVG, a client joining or leaving moves only the queues it takes or gave up; the
    price is an uneven split (with 10 virtual nodes a client may get none of 4 queues).
    """

    def __init__(
        self,
        virtual_nodes: int = DEFAULT_VIRTUAL_NODES,
        hash_function: Callable[[str], int] = md5_hash,
    ) -> None:
        if virtual_nodes < 0:
            raise ClientError(f"illegal virtual node count: {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self.hash_function = hash_function

    @property
    def name(self) -> str:
        return "CONSISTENT_HASH"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(consumer_group, current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, _index = prepared
        ring = _HashRing(cids, self.virtual_nodes, self.hash_function)
        return [mq for mq in mqs if ring.route(message_queue_key(mq)) == current_cid]


class AllocateMessageQueueByConfig:
    """A fixed list, whatever the route and the group say (RocketMQ's CONFIG).

    Every consumer configured so takes the whole list: use it with one consumer per list.
    """

    def __init__(self, message_queues: Iterable[MessageQueue]) -> None:
        self.message_queues = list(message_queues)

    @property
    def name(self) -> str:
        return "CONFIG"

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        return list(self.message_queues)


def _java_split(text: str, separator: str) -> list[str]:
    """String.split as Java does it: trailing empty strings are dropped."""
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


class AllocateMessageQueueByMachineRoom:
    """Queues of brokers named "room@name" whose room is in `consumer_idcs`, shared evenly.

    Queues of other brokers (another room, or a name without exactly one "@") go to nobody.
    The P kept queues split as: consumer i takes positions [i*d, i*d + d) with d = P // M, then
    consumer i < P % M also takes position d*M + i. Example, 8 queues / 3 consumers:
    [0,1,6] [2,3,7] [4,5].
    """

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs = frozenset(consumer_idcs)

    @property
    def name(self) -> str:
        return "MACHINE_ROOM"

    def _in_rooms(self, mq: MessageQueue) -> bool:
        parts = _java_split(mq.broker_name, "@")
        return len(parts) == 2 and parts[0] in self.consumer_idcs

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(consumer_group, current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, index = prepared
        kept = [mq for mq in mqs if self._in_rooms(mq)]
        per_consumer, rest = divmod(len(kept), len(cids))
        result = kept[index * per_consumer : (index + 1) * per_consumer]
        if index < rest:
            result.append(kept[per_consumer * len(cids) + index])
        return result


class MachineRoomResolver(Protocol):
    """Which machine room a broker's queue and a client live in; never empty."""

    def broker_deploy_in(self, mq: MessageQueue) -> str: ...

    def consumer_deploy_in(self, client_id: str) -> str: ...


class PrefixMachineRoomResolver:
    """The room is the text before the first `separator` of the broker name and the client id.

    E.g. broker "hz@broker-a" is in room "hz"; with separator "-", client "hz-10.0.0.5@123" is
    too. A name without the separator is its own room.
    """

    def __init__(self, broker_separator: str = "@", client_separator: str = "@") -> None:
        self.broker_separator = broker_separator
        self.client_separator = client_separator

    def broker_deploy_in(self, mq: MessageQueue) -> str:
        return mq.broker_name.split(self.broker_separator, 1)[0]

    def consumer_deploy_in(self, client_id: str) -> str:
        return client_id.split(self.client_separator, 1)[0]


class AllocateMachineRoomNearby:
    """Same-room consumers first; rooms without a live consumer are shared by all.

    Queues and clients are grouped by room (the resolver). This client gets the inner
    strategy's share of its own room's queues among its own room's clients, plus, for every room
    that has queues but no client, the inner strategy's share of those queues among all clients.
    Rooms are visited in name order, like RocketMQ's TreeMap.
    """

    def __init__(self, strategy: AllocateStrategy, resolver: MachineRoomResolver) -> None:
        self.strategy = strategy
        self.resolver = resolver

    @property
    def name(self) -> str:
        return f"MACHINE_ROOM_NEARBY-{self.strategy.name}"

    def _room_of_queue(self, mq: MessageQueue) -> str:
        room = self.resolver.broker_deploy_in(mq)
        if not room:
            raise ClientError(f"machine room is empty for {mq}")
        return room

    def _room_of_client(self, cid: str) -> str:
        room = self.resolver.consumer_deploy_in(cid)
        if not room:
            raise ClientError(f"machine room is empty for consumer {cid}")
        return room

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        prepared = _prepare(consumer_group, current_cid, mq_all, cid_all)
        if prepared is None:
            return []
        mqs, cids, _index = prepared
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            queues_by_room.setdefault(self._room_of_queue(mq), []).append(mq)
        clients_by_room: dict[str, list[str]] = {}
        for cid in cids:
            clients_by_room.setdefault(self._room_of_client(cid), []).append(cid)

        here = self._room_of_client(current_cid)
        result = []
        local = queues_by_room.pop(here, [])
        if local:
            result += self.strategy.allocate(
                consumer_group, current_cid, local, clients_by_room[here]
            )
        for room in sorted(queues_by_room):
            if room not in clients_by_room:
                result += self.strategy.allocate(
                    consumer_group, current_cid, queues_by_room[room], cids
                )
        return result
