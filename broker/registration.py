"""Registration with the name servers (RocketMQ's BrokerOuterAPI.registerBrokerAll), sent so that
its cost follows the changes, not the size of the topic table.

The broker registers with every name server of namesrvAddr in parallel: at start, whenever its
topic table changes, and every registerNameServerPeriod (clamped to 10-60 s, as RocketMQ does).
Each call waits at most registerBrokerTimeoutMills. The result of the first name server that
answered tells a slave its master's HA address and broker address. At stop the broker
unregisters from every name server.

Per name server it keeps the version that name server holds for it (`held`) and the topics
changed since (`pending`), and sends (formats in client/protocol/namesrv.py):

- a full registration when the name server holds nothing of it: the first time, after a
  failure, when the name server asks for one (it restarted or missed a change), after the
  broker's identity or permission changed, or, when registrations are not split, when more than
  `MAX_INCREMENT_TOPICS` topics are pending (an increment is one body then). A table of more
  than splitRegistrationSize topics is sent in parts of that many (enableSplitRegistration),
  each compressed with compressedRegister, so no frame grows with the table;
- otherwise an incremental registration: only the pending topics (their configs, or their
  names when deleted), on the version the name server holds, in requests of at most
  splitRegistrationSize topics (all but the last on the held version, so the name server's
  work per request stays bounded and a failure in between leaves its version valid; the
  middle ones PARTS_IN_FLIGHT at once, the last once they were all answered). With
  nothing pending it is the periodic heartbeat: a few hundred bytes, whatever the table's
  size. A name server that does not answer it as one (a RocketMQ name server) gets full
  registrations only, as from RocketMQ.

An auto-created `%RETRY%` topic is one pending topic like any other: it costs an incremental
registration, never a full one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from tidemq.client.protocol.models import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from tidemq.client.protocol.namesrv import (
    NamesrvResponseError,
    RegisterBrokerBody,
    RegisterBrokerResult,
    UnregisterBrokerRequestHeader,
    check_success,
    full_registration_json,
    increment_registration_json,
    parse_register_broker_response,
    register_broker_request,
    simple_request,
)
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.transport.client import RemotingClient
from tidemq.common.lifecycle import BackgroundTask, Service, Step

log = logging.getLogger(__name__)

# Parts of a split full registration in flight at once, with a name server that takes them in
# any order: the broker makes the next parts while the name server reads the last ones.
PARTS_IN_FLIGHT: Final = 4

# Unsplit registrations (enableSplitRegistration=false): more pending topics than this are sent
# as a full registration rather than one incremental body of several MB. Split, increments of
# any size go in requests of splitRegistrationSize: a creation of a million topics at 22,000/s
# left registration more than 50,000 topics behind, which sent the whole table (788,008 then
# 1,000,008 topics: seconds of the broker's and the name server's CPU each) where the changes
# alone were due (scale5).
MAX_INCREMENT_TOPICS: Final = 50_000


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    master_epoch: int | None = None  # controller mode: an elected master's epoch


@dataclass(frozen=True, slots=True)
class RegistrationTable:
    """What registration reads of the broker's topic table: all of it (as registered: perms
    limited by the broker's), one topic, and the current version."""

    wrapper: Callable[[], TopicConfigSerializeWrapper]
    topic: Callable[[str], TopicConfig | None]
    version: Callable[[], DataVersion]
    # (topic, its TopicConfig JSON as registered) for every topic, or None when the table's
    # texts are not what is registered (a broker limiting its topics' perms): a JSON full
    # registration is then made of these texts without decoding them.
    json_rows: Callable[[], list[tuple[str, str]] | None] = lambda: None
    # One topic's TopicConfig JSON as registered (None: deleted), used while `texts_registered`
    # holds: an incremental registration is then made of these texts (topics created in lists
    # are kept as such texts, not decoded: broker/managers/topic_config.py).
    json_row: Callable[[str], str | None] = lambda _topic: None
    texts_registered: Callable[[], bool] = lambda: False


@dataclass(frozen=True, slots=True)
class RegistrationShape:
    """enableSplitRegistration, splitRegistrationSize and compressedRegister."""

    split: bool = True
    split_size: int = 800
    compressed: bool = False


@dataclass(slots=True)
class NameServerSync:
    """What one name server holds of this broker: `held` None means nothing usable."""

    held: DataVersion | None = None
    # topic -> its TopicConfig JSON text as noted with the change (None: looked up when sent)
    pending: dict[str, str | None] = field(default_factory=dict)
    # False once the name server answered an incremental registration as a RocketMQ one does.
    takes_increments: bool = True
    full_registrations: int = 0
    incremental_registrations: int = 0


ResultListener = Callable[[RegisterBrokerResult], None]


def _ends_increment(result: RegisterBrokerResult | None) -> bool:
    """Whether an increment's request ends it: no answer, or the name server wants a full
    registration (or does not take increments)."""
    return result is None or result.full_registration_needed or not result.incremental


def registration_period_ms(configured: int) -> int:
    return max(10_000, min(configured, 60_000))


class NameServerRegistration(Service):
    """Children: the first registration and, at stop, the unregistration; the periodic loop."""

    def __init__(
        self,
        identity: BrokerIdentity,
        name_servers: list[str],
        client: RemotingClient,
        table: RegistrationTable,
        *,
        period_ms: int,
        timeout_ms: int,
        shape: RegistrationShape | None = None,
        on_result: ResultListener | None = None,
    ) -> None:
        self.identity = identity
        self.name_servers = name_servers
        self.client = client
        self.table = table
        self.shape = shape or RegistrationShape()
        self.period = registration_period_ms(period_ms) / 1000
        self.timeout = timeout_ms / 1000
        self.on_result = on_result
        self._wakeup = asyncio.Event()
        self.registrations = 0
        self.sync = {address: NameServerSync() for address in name_servers}
        super().__init__()
        self.add_child(Step(start=self.register_all, stop=self._unregister_all))
        self.add_child(BackgroundTask(self._run, "register-broker"))

    def request_registration(self) -> None:
        """Register soon (the topic table changed)."""
        self._wakeup.set()

    def note_change(self, topic: str, text: str | None = None) -> None:
        """`topic` was created, changed or deleted: the next registration sends it. `text`:
        its TopicConfig JSON as the table now keeps it (`RegistrationTable.json_row`), when the
        change came with it: sent as it is while `texts_registered` holds, instead of looking
        the topic up again when it is sent (in a table of a million, a few cache misses each;
        the drift note)."""
        for sync in self.sync.values():
            sync.pending[topic] = text
        self._wakeup.set()

    def request_full(self) -> None:
        """Every name server gets a full registration soon (the whole table changed, or what
        every topic registers as: the broker's permission)."""
        for sync in self.sync.values():
            sync.held = None
        self._wakeup.set()

    def change_identity(self, identity: BrokerIdentity) -> None:
        """Controller mode: the broker was elected master (id 0, with its epoch); register as it
        with every name server now."""
        self.identity = identity
        self.request_full()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.period)
            self._wakeup.clear()
            try:
                await self.register_all()
            except Exception:
                log.exception("registration with the name servers failed")

    async def register_all(self) -> list[RegisterBrokerResult]:
        if not self.name_servers:
            return []
        results = await asyncio.gather(*(self._sync_one(address) for address in self.name_servers))
        answered = [r for r in results if r is not None]
        self.registrations += 1
        if answered and self.on_result is not None:
            self.on_result(answered[0])
        return answered

    async def _sync_one(self, address: str) -> RegisterBrokerResult | None:
        sync = self.sync.setdefault(address, NameServerSync())
        if (
            sync.takes_increments
            and sync.held is not None
            and (self.shape.split or len(sync.pending) <= MAX_INCREMENT_TOPICS)
        ):
            result = await self._register_increment(address, sync)
            if result is not None and not result.incremental:
                log.warning(
                    "name server %s does not take incremental registrations: sending it full "
                    "ones only",
                    address,
                )
                sync.takes_increments = False
            elif result is None or not result.full_registration_needed:
                return result
            else:
                log.info("name server %s asks for a full registration", address)
        return await self._register_full(address, sync)

    async def _register_increment(
        self, address: str, sync: NameServerSync
    ) -> RegisterBrokerResult | None:
        base = sync.held
        assert base is not None
        topics, sync.pending = sync.pending, {}
        # The topics' JSON texts as they are, when those are what is registered: no
        # TopicConfig made and encoded again per topic (not for a compressed body).
        texts = not self.shape.compressed and self.table.texts_registered()
        lookup: Callable[[str], TopicConfig | str | None] = (
            self.table.json_row if texts else self.table.topic
        )
        changed: dict[str, TopicConfig | str] = {}
        deleted: list[str] = []
        for topic, noted in topics.items():
            config = noted if texts and noted is not None else lookup(topic)
            if config is None:
                deleted.append(topic)
            else:
                changed[topic] = config
        version = self.table.version()
        # Requests of at most splitRegistrationSize topics, so that the name server's work per
        # request stays bounded. All but the last keep the base version (the name server's
        # version moves only with the last), so any of them failing leaves the base valid.
        entries: list[tuple[str, TopicConfig | str | None]] = [
            *changed.items(),
            *((topic, None) for topic in deleted),
        ]
        size = self.shape.split_size if self.shape.split else max(1, len(entries))
        chunks = [entries[i : i + size] for i in range(0, len(entries), size)] or [[]]

        def body(index: int) -> RegisterBrokerBody | bytes:
            chunk = chunks[index]
            on = version if index == len(chunks) - 1 else base
            gone = [t for t, c in chunk if c is None]
            if texts:
                rows = [(t, c) for t, c in chunk if isinstance(c, str)]
                return increment_registration_json(rows, on, base, gone)
            wrapper = TopicConfigSerializeWrapper(
                {t: c for t, c in chunk if isinstance(c, TopicConfig)}, on
            )
            return RegisterBrokerBody(wrapper, [], base_data_version=base, deleted_topics=gone)

        async def send(index: int) -> RegisterBrokerResult | None:
            result = await self._register_one(address, body(index), incremental_json=texts)
            if result is not None:
                sync.incremental_registrations += 1
            return result

        # The first request alone until the name server has taken an increment (one that
        # does not take them says so at once); the middle ones up to PARTS_IN_FLIGHT at once,
        # as each applies on the base version alone, in any order; the last, which moves the
        # version, once all the others were answered. One at a time, a registration lagged a
        # creation of 20,000-30,000 topics/s by up to 100,000 topics (each answer waited
        # behind the creation's requests on the loop): routes came seconds late, and the
        # creation's CPU per tenth moved with the lag (the drift note).
        first = 0
        result: RegisterBrokerResult | None = None
        if not sync.incremental_registrations or len(chunks) == 1:
            result = await send(0)
            first = 1
        if first < len(chunks) - 1 and (first == 0 or not _ends_increment(result)):
            result = await self._pipelined(send, range(first, len(chunks) - 1))
        if not _ends_increment(result) and len(chunks) > 1:
            result = await send(len(chunks) - 1)
        if result is None:  # sent again with the next changes, on the same base
            for topic, config in (entry for part in chunks for entry in part):
                # a change noted since is newer
                sync.pending.setdefault(topic, config if isinstance(config, str) else None)
            return None
        if result.full_registration_needed or not result.incremental:
            sync.held = None
            return result
        sync.held = version
        return result

    @staticmethod
    async def _pipelined(
        send: Callable[[int], Awaitable[RegisterBrokerResult | None]], indexes: Iterable[int]
    ) -> RegisterBrokerResult | None:
        """`send` each index, up to PARTS_IN_FLIGHT at once; the first result that ends the
        increment (`_ends_increment`), else the last one."""
        in_flight: set[asyncio.Task[RegisterBrokerResult | None]] = set()
        result: RegisterBrokerResult | None = None
        try:
            for index in indexes:
                in_flight.add(asyncio.ensure_future(send(index)))
                if len(in_flight) >= PARTS_IN_FLIGHT:
                    done, in_flight = await asyncio.wait(
                        in_flight, return_when=asyncio.FIRST_COMPLETED
                    )
                    for task in done:
                        result = task.result()
                        if _ends_increment(result):
                            return result
            if in_flight:
                done, in_flight = await asyncio.wait(in_flight)
                for task in done:
                    result = task.result()
                    if _ends_increment(result):
                        return result
            return result
        finally:
            for task in in_flight:
                task.cancel()

    async def _register_full(
        self, address: str, sync: NameServerSync
    ) -> RegisterBrokerResult | None:
        # Changes from here on are pending against the version of this snapshot.
        sync.pending = {}
        sync.held = None
        bodies, version, topics = self._full_bodies()
        count = len(bodies)
        split = (lambda index: (index, count)) if count > 1 else (lambda _index: None)
        # The first part alone (it tells whether the name server takes parts in any order),
        # the middle ones pipelined when it does, the last one once all others were answered.
        result = await self._register_one(address, bodies[0](), split(0))
        if result is None:
            return None  # held stays None: the next round sends a full one again
        window = PARTS_IN_FLIGHT if result.split else 1
        middle = iter(range(1, count - 1))
        in_flight: set[asyncio.Task[RegisterBrokerResult | None]] = set()
        failed = False
        try:
            for index in middle:
                request = self._register_one(address, bodies[index](), split(index))
                in_flight.add(asyncio.ensure_future(request))
                if len(in_flight) >= window:
                    done, in_flight = await asyncio.wait(
                        in_flight, return_when=asyncio.FIRST_COMPLETED
                    )
                    if any(task.result() is None for task in done):
                        failed = True
                        break
            if in_flight and not failed:
                done, in_flight = await asyncio.wait(in_flight)
                failed = any(task.result() is None for task in done)
        finally:
            for task in in_flight:
                task.cancel()
        if failed:
            return None
        if count > 1:
            result = await self._register_one(address, bodies[-1](), split(count - 1))
            if result is None:
                return None
        sync.full_registrations += 1
        sync.held = version
        log.info(
            "full registration with name server %s: %d topics in %d part(s)%s",
            address,
            topics,
            count,
            f", {window} in flight" if count > 2 else "",
        )
        return result

    def _full_bodies(
        self,
    ) -> tuple[list[Callable[[], RegisterBrokerBody | bytes]], DataVersion, int]:
        """A snapshot of the table as parts of a full registration, each made when it is sent
        (with the snapshot's version and topic count):
        the rows' JSON texts put together (`full_registration_json`) when the table gives them
        and the body is not compressed, else `RegisterBrokerBody`s."""
        size = self.shape.split_size if self.shape.split else 0
        rows = None if self.shape.compressed else self.table.json_rows()
        if rows is not None:
            version = self.table.version()
            step = size if size and len(rows) > size else max(1, len(rows))
            made: list[Callable[[], RegisterBrokerBody | bytes]] = [
                functools.partial(full_registration_json, rows[start : start + step], version)
                for start in range(0, max(1, len(rows)), step)
            ]
            return made, version, len(rows)
        wrapper = self.table.wrapper()
        items = list(wrapper.topic_config_table.items())
        if not size or len(items) <= size:
            parts = [items]
        else:
            parts = [items[start : start + size] for start in range(0, len(items), size)]

        def body(part: list[tuple[str, TopicConfig]]) -> RegisterBrokerBody:
            return RegisterBrokerBody(TopicConfigSerializeWrapper(dict(part), wrapper.data_version))

        return (
            [functools.partial(body, part) for part in parts],
            wrapper.data_version,
            len(items),
        )

    async def _register_one(
        self,
        address: str,
        body: RegisterBrokerBody | bytes,
        split: tuple[int, int] | None = None,
        *,
        incremental_json: bool = False,
    ) -> RegisterBrokerResult | None:
        ident = self.identity
        request = register_broker_request(
            broker_name=ident.broker_name,
            broker_addr=ident.broker_addr,
            cluster_name=ident.cluster_name,
            ha_server_addr=ident.ha_server_addr,
            broker_id=ident.broker_id,
            body=body,
            compressed=self.shape.compressed,
            master_epoch=ident.master_epoch,
            split=split,
            incremental_json=incremental_json,
        )
        try:
            response = await self.client.invoke(address, request, self.timeout)
            return parse_register_broker_response(response)
        except (ConnectionError, TimeoutError, NamesrvResponseError, ValueError) as exc:
            log.warning(
                "register broker %s with name server %s failed: %s", ident.broker_name, address, exc
            )
            return None

    async def _unregister_all(self) -> None:
        await asyncio.gather(*(self._unregister_one(a) for a in self.name_servers))

    async def _unregister_one(self, address: str) -> None:
        ident = self.identity
        header = UnregisterBrokerRequestHeader(
            broker_name=ident.broker_name,
            broker_addr=ident.broker_addr,
            cluster_name=ident.cluster_name,
            broker_id=ident.broker_id,
        )
        try:
            response = await self.client.invoke(
                address, simple_request(RequestCode.UNREGISTER_BROKER, header), self.timeout
            )
            check_success(response)
        except (ConnectionError, TimeoutError, NamesrvResponseError, ValueError) as exc:
            log.warning("unregister from name server %s failed: %s", address, exc)
