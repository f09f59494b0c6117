"""Measurements of a broker with many topics and many clients (issue 34), for the scale section of
`make bench` (tests/bench/scale_bench.py) and its short seeded run in `make test`
(tests/integration/test_scale.py).

Everything talks the wire protocol through `BrokerAPI` or raw sockets, so the same functions
measure a broker that lacks the batch request (main before issue 34): `create_topics` then falls
back to UPDATE_AND_CREATE_TOPIC one by one, 16 in flight, as the issue measured it.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import random
import statistics
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tests.support.conditions import eventually
from tidemq.client.api import BrokerAPI
from tidemq.client.protocol.heartbeat import (
    ConsumerData,
    HeartbeatData,
    ProducerData,
    SubscriptionData,
)
from tidemq.client.protocol.models import TopicConfig
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.frame import encode_command, parse_frames
from tidemq.client.remoting.json_body import dumps

QUEUES = 8
SINGLE_IN_FLIGHT = 16  # as `mqadmin updateTopic` in a shell loop of 16, the measurement
_LENGTH = struct.Struct(">i")


def topic_name(index: int) -> str:
    return f"ScaleT{index:07d}"


@dataclass
class CreationRun:
    """Topics created, and (topics so far, seconds so far) after each request completed."""

    batch: bool
    timeline: list[tuple[int, float]] = field(default_factory=list)
    # (topics so far, CPU seconds of the broker and name server so far) when a `cpu` reader
    # was given: what the daemons spent, whatever else the machine was doing
    cpu_timeline: list[tuple[int, float]] = field(default_factory=list)

    @property
    def topics(self) -> int:
        return self.timeline[-1][0] if self.timeline else 0

    @property
    def seconds(self) -> float:
        return self.timeline[-1][1] if self.timeline else 0.0

    def rate(self) -> float:
        return self.topics / self.seconds if self.seconds else float("nan")

    def rate_between(self, low: float, high: float) -> float:
        """Topics per second between the fractions `low` and `high` of the topics created."""
        total = self.topics
        # From the last point at or before `low` to the first at or after `high`: whole
        # requests, so two that ended together do not make a span of nothing.
        begin = max((p for p in self.timeline if p[0] <= low * total), default=(0, 0.0))
        end = next(p for p in self.timeline if p[0] >= high * total)
        span = end[1] - begin[1]
        return (end[0] - begin[0]) / span if span > 0 else float("nan")

    def cpu_us_per_topic_between(self, low: float, high: float) -> float:
        """CPU microseconds of the daemons per topic created between the fractions `low` and
        `high` (nan without a CPU timeline)."""
        if not self.cpu_timeline:
            return float("nan")
        total = self.topics
        begin = max((p for p in self.cpu_timeline if p[0] <= low * total), default=(0, 0.0))
        end = next(p for p in self.cpu_timeline if p[0] >= high * total)
        topics = end[0] - begin[0]
        return (end[1] - begin[1]) / topics * 1e6 if topics else float("nan")


async def serves_topic_lists(api: BrokerAPI, broker: str) -> bool:
    """Whether the broker serves UPDATE_AND_CREATE_TOPIC_LIST (an empty list changes nothing)."""
    request = api.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=dumps({"topicConfigList": []})
    )
    response = await api.invoke(broker, request, 10.0)
    return response.code == ResponseCode.SUCCESS


async def create_topic_list(api: BrokerAPI, broker: str, configs: Sequence[TopicConfig]) -> None:
    body = dumps({"topicConfigList": [c.to_dict() for c in configs]})
    await api.call(
        broker, api.request(RequestCode.UPDATE_AND_CREATE_TOPIC_LIST, body=body), timeout=120.0
    )


async def create_topics(
    api: BrokerAPI,
    broker: str,
    first: int,
    count: int,
    *,
    batch_size: int,
    in_flight: int = 2,
    run: CreationRun | None = None,
    started: float | None = None,
    cpu: Callable[[], float] | None = None,
    names: Callable[[int], str] = topic_name,
) -> CreationRun:
    """Create topics `names(first)` .. `names(first + count - 1)` (8 queues each): in lists of
    `batch_size` when the broker serves them, else one by one; appended to `run`'s timeline."""
    if run is None:
        run = CreationRun(await serves_topic_lists(api, broker))
    if cpu is not None and not run.cpu_timeline:
        # where the spans begin: the daemons' CPU before the first request (their start-up's
        # CPU is not the creation's)
        run.cpu_timeline.append((run.topics, cpu()))
    begin = time.perf_counter() if started is None else started
    done = run.topics
    size = batch_size if run.batch else 1
    chunks = [range(i, min(i + size, first + count)) for i in range(first, first + count, size)]
    queue = list(reversed(chunks))

    async def worker() -> None:
        nonlocal done
        while queue:
            chunk = queue.pop()
            configs = [TopicConfig(names(i), QUEUES, QUEUES) for i in chunk]
            if run.batch:
                await create_topic_list(api, broker, configs)
            else:
                await api.create_topic(broker, configs[0])
            done += len(configs)
            run.timeline.append((done, time.perf_counter() - begin))
            if cpu is not None:
                run.cpu_timeline.append((done, cpu()))

    workers = in_flight if run.batch else SINGLE_IN_FLIGHT
    await asyncio.gather(*(worker() for _ in range(workers)))
    return run


async def one_more_create_ms(api: BrokerAPI, broker: str, tag: str, samples: int) -> list[float]:
    """Milliseconds of single creates (UPDATE_AND_CREATE_TOPIC, as `mqadmin updateTopic`), one
    after the other."""
    times = []
    for i in range(samples):
        config = TopicConfig(f"OneMore{tag}x{i}", QUEUES, QUEUES)
        started = time.perf_counter()
        await api.create_topic(broker, config)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def alternate_creates_ms(
    api: BrokerAPI, brokers: Sequence[str], tag: str, samples: int
) -> list[list[float]]:
    """Milliseconds of single creates on each of `brokers` in turn (one on the first, one on
    the second, ...), `samples` each: whatever the disk and the machine do to one broker's
    sample, they do to its neighbours' alike."""
    times: list[list[float]] = [[] for _ in brokers]
    for i in range(samples):
        for broker, taken in zip(brokers, times, strict=True):
            config = TopicConfig(f"OneMore{tag}x{i}", QUEUES, QUEUES)
            started = time.perf_counter()
            await api.create_topic(broker, config)
            taken.append((time.perf_counter() - started) * 1000)
    return times


async def route_query_ms(
    api: BrokerAPI, namesrv: str, topics: int, samples: int, rng: random.Random
) -> list[float]:
    """Milliseconds of GET_ROUTEINFO_BY_TOPIC for random topics of the `topics` created.

    Each topic is first waited for until routable, untimed: a broker registers its pending
    topics in requests of splitRegistrationSize taken from a set, so the last topic of a list
    being routable does not mean every topic of that list is yet."""
    chosen = [topic_name(rng.randrange(topics)) for _ in range(samples)]
    for topic in chosen:
        await eventually(
            functools.partial(api.get_route, namesrv, topic), f"the route of {topic}", 300
        )
    times = []
    for topic in chosen:
        started = time.perf_counter()
        route = await api.get_route(namesrv, topic)
        times.append((time.perf_counter() - started) * 1000)
        assert route is not None, topic
    return times


async def send_ms(
    api: BrokerAPI, broker: str, topics: int, samples: int, rng: random.Random
) -> list[float]:
    """Milliseconds of single 128-byte sends, each to a random topic of the `topics` created."""
    from tests.support.wire import send_header

    body = b"x" * 128
    times = []
    for _ in range(samples):
        topic = topic_name(rng.randrange(topics))
        header = send_header(topic, rng.randrange(QUEUES))
        started = time.perf_counter()
        await api.send(broker, header, body)
        times.append((time.perf_counter() - started) * 1000)
    return times


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fitted_first_over_last(spans: Sequence[float]) -> float:
    """The first span's value over the last one's, both read off a Theil-Sen line through all
    of `spans` (equally spaced; slope: the median of the slopes between every two of them;
    intercept: the median of what each gives): the trend over the whole creation, which one
    span's lump (a full collection, a burst of the machine's other work, registration catching
    up) moves little, where the two end spans alone move with it. nan below two values."""
    points = [(i, v) for i, v in enumerate(spans) if not math.isnan(v)]
    if len(points) < 2:
        return float("nan")
    slope = statistics.median(
        (vj - vi) / (j - i) for (i, vi), (j, vj) in itertools.combinations(points, 2)
    )
    intercept = statistics.median(v - slope * i for i, v in points)
    last = intercept + slope * (len(spans) - 1)
    return intercept / last if last else float("nan")


# --- many idle clients -------------------------------------------------------------------------


def heartbeat_body(client: int, groups: int) -> bytes:
    """A HEART_BEAT body of client `client`: a producer and a consumer of group
    `client % groups`. Made once per client, as a real client keeps its subscriptions (their
    subVersion stays; a newer one on every heartbeat would be a changed subscription each)."""
    group = f"ScaleG{client % groups:04d}"
    data = HeartbeatData(
        f"127.0.0.1@scale{client}",
        [ProducerData(f"{group}-P")],
        [ConsumerData(group, subscriptions=[SubscriptionData(topic_name(client % groups))])],
    )
    return data.encode()


def heartbeat_frame(body: bytes, opaque: int) -> bytes:
    request = RemotingCommand.request(RequestCode.HEART_BEAT, None, body)
    request.opaque = opaque
    return encode_command(request)


def consumer_list_frame(group: str, opaque: int) -> bytes:
    """GET_CONSUMER_LIST_BY_GROUP of `group`: the lookup a consumer makes at each rebalance."""
    request = RemotingCommand.request(
        RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}
    )
    request.opaque = opaque
    return encode_command(request)


# Opaques of the lookups: above any heartbeat's (those count up from 1).
_LOOKUP_OPAQUES = 1 << 30


@dataclass
class IdleClients:
    """`count` connections, each heartbeating every `interval` seconds (spread evenly) and
    reading whatever the broker sends: answers (a lookup's is matched by its opaque) and
    consumer-id change notifications (counted)."""

    address: str
    count: int
    groups: int
    interval: float
    heartbeats: int = 0
    failures: int = 0
    notifications: int = 0  # NOTIFY_CONSUMER_IDS_CHANGED received, all connections together
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)
    _waiting: dict[int, asyncio.Future[RemotingCommand]] = field(default_factory=dict)
    _bodies: list[bytes] = field(default_factory=list)  # each client's heartbeat body
    _closing: bool = False

    async def connect(self, on_progress: Callable[[int], None] | None = None) -> None:
        for client in range(self.count):
            await self._open(client)
            if client % 500 == 0:
                await self._writers[-1].drain()
                if on_progress is not None:
                    on_progress(client)
        self._tasks.append(asyncio.create_task(self._beat()))

    async def _open(self, client: int) -> None:
        host, port = self.address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        self._writers.append(writer)
        self._tasks.append(asyncio.create_task(self._drain(reader)))
        self._bodies.append(heartbeat_body(client, self.groups))
        writer.write(heartbeat_frame(self._bodies[client], client + 1))
        self.heartbeats += 1

    async def join(self, count: int) -> None:
        """`count` more clients connect and heartbeat (new consumers of groups 0, 1, ...):
        each is a membership change the broker announces to every member of its group."""
        for _ in range(count):
            await self._open(len(self._writers))

    async def _drain(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                prefix = await reader.readexactly(4)
                frame = prefix + await reader.readexactly(_LENGTH.unpack(prefix)[0])
                (command,), _ = parse_frames(memoryview(frame), len(frame))
                if not command.is_response:
                    if command.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
                        self.notifications += 1
                    continue
                waiter = self._waiting.pop(command.opaque, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(command)
        except (asyncio.IncompleteReadError, ConnectionError):
            if not self._closing:
                self.failures += 1

    async def _beat(self) -> None:
        pause = self.interval / max(1, self.count)
        opaque = len(self._writers) + 1
        while True:
            for client, writer in enumerate(self._writers[: self.count]):
                writer.write(heartbeat_frame(self._bodies[client], opaque))
                opaque += 1
                self.heartbeats += 1
                await asyncio.sleep(pause)

    async def lookup_ms(self, samples: int, rng: random.Random) -> list[float]:
        """Milliseconds of GET_CONSUMER_LIST_BY_GROUP, one after the other, each from a random
        client for its own group (as a rebalance asks); each answer lists that client."""
        times = []
        for sample in range(samples):
            client = rng.randrange(self.count)
            opaque = _LOOKUP_OPAQUES + sample
            answer: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
            self._waiting[opaque] = answer
            started = time.perf_counter()
            self._writers[client].write(
                consumer_list_frame(f"ScaleG{client % self.groups:04d}", opaque)
            )
            command = await asyncio.wait_for(answer, 30)
            times.append((time.perf_counter() - started) * 1000)
            assert command.code == ResponseCode.SUCCESS, command.remark
            assert f"scale{client}".encode() in (command.body or b""), client
        return times

    @property
    def all_connections(self) -> list[asyncio.StreamWriter]:
        return self._writers

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()
