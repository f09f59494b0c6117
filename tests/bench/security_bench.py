"""Security benchmark: what access control costs, measured against the same broker without it.

- ACL: two brokers of one name server, one with `aclEnable=true` (a plain_acl.yml granting the
  bench account PUB|SUB on the topic, so every request is signed by the client and its signature
  and permissions checked by the broker), one without. Batched sends (32 x 1 KiB, 8 in flight)
  and single sends (1 KiB, 64 in flight) go to each in turn, alternating, best of `ROUNDS`
  rounds each (a loaded 2-core machine moves single figures by more than the cost measured).
  Target (issue 17): ACL on at least 0.95 of ACL off, both kinds of send. Where it goes: the
  signature is an HMAC-SHA1 over every request's body, computed twice (client and broker):
  about 19 us per 32 KiB batch on each side (0.6 us per message), plus some 4 us of Python per
  request on each side for a single send (the sorted ext values, the HMAC object, Base64, the
  permission look-up). The HMAC alone bounds the ratio when client and broker share the
  machine's cores: off CPU / (off CPU + two HMACs per message), printed beside each ratio
  (about 0.75 for batches and 0.9 for single sends on the 2-core machine: under the target);
  the ratio as a share of that bound has issue 36's target, 0.95. The bound's HMAC is OpenSSL's
  HMAC object as Python's `hmac` gives it (a copy, two updates, a digest), the bound issue 36
  set; tidemq's own signing key (compiled: SHA-1 contexts copied on the stack, no allocation)
  costs less, and its figure is printed in the bound's note.
- TLS pulls: one broker with `tls.server.mode=permissive` (TLS and plaintext on one port) holding
  a backlog; pulls of 32 from 8 queues, 8 in flight, over plaintext and over TLS in turn, best
  of `ROUNDS`; the ratio TLS / plaintext (reported, no target).
- HA catch-up over TLS: a slave catching up a master's backlog (256 MiB by default,
  TIDEMQ_BENCH_SECURITY_HA_MB), plaintext and then with `haTlsEnable` (certificates on both
  sides), as the HA section measures it; the ratio TLS / plaintext (reported, no target).

Certificates are made for the run (tests/support/certs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import time
import timeit
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path

from tests.bench import BROKER_SIZES, Result, env_int, one_broker, run_on_uvloop, temp_dir
from tests.bench.broker_bench import QUEUES, TOPIC, _batched_sends, _pulls, _single_sends
from tests.bench.client_bench import _create_topics
from tests.bench.client_bench import _single_sends as _producer_single_sends
from tests.bench.cpu import BrokerCpu
from tests.bench.ha_bench import _catch_up
from tests.support.certs import Pki, make_pki
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.message import Message, SendStatus
from tidemq.client.producer import AsyncProducer
from tidemq.client.remoting.signing import SessionCredentials, signing_key
from tidemq.client.transport.tls import TlsClientSettings
from tidemq.common.mac import Mac

ROUNDS = 3
BENCH_ACCOUNT = SessionCredentials("bench-account", "bench-secret")
# Creates the producers' topic on the ACL broker (UPDATE_AND_CREATE_TOPIC asks for an admin).
ADMIN_ACCOUNT = SessionCredentials("bench-admin", "bench-admin-secret")
PLAIN_TOPIC = "BenchProducerPlain"
ACL_TOPIC = "BenchProducerAcl"
ACL_FILE = f"""\
accounts:
  - accessKey: {BENCH_ACCOUNT.access_key}
    secretKey: {BENCH_ACCOUNT.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [BenchTopic=PUB|SUB, {ACL_TOPIC}=PUB|SUB, TBW102=PUB|SUB]
  - accessKey: {ADMIN_ACCOUNT.access_key}
    secretKey: {ADMIN_ACCOUNT.secret_key}
    admin: true
"""
BODY = os.urandom(1024)


@contextlib.contextmanager
def _brokers(folder: Path) -> Iterator[tuple[Daemon, Daemon, Daemon]]:
    """(name server, ACL off, ACL on): two brokers of one name server."""
    acl_file = folder / "plain_acl.yml"
    acl_file.write_text(ACL_FILE)
    group = ProcessGroup(folder / "logs")
    try:
        namesrv = group.namesrvd(name="namesrvd")
        plain = group.brokerd(
            namesrv.address, folder / "plain", *BROKER_SIZES, "brokerName=plain", name="plain"
        )
        guarded = group.brokerd(
            namesrv.address,
            folder / "acl",
            *BROKER_SIZES,
            "brokerName=acl",
            "aclEnable=true",
            f"aclFile={acl_file}",
            name="acl",
        )
        yield namesrv, plain, guarded
    finally:
        group.stop_all()


async def _producer_batched(producer: AsyncProducer, topic: str, messages: int) -> float:
    remaining = messages // 32

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            result = await producer.send_batch([Message(topic, BODY) for _ in range(32)])
            assert result.status is SendStatus.SEND_OK, result.status

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(8)))
    return messages // 32 * 32 / (time.perf_counter() - started)


async def _acl(namesrv: str, plain: Daemon, guarded: Daemon, messages: int) -> list[Result]:
    off = BrokerAPI()
    on = BrokerAPI(credentials=BENCH_ACCOUNT)
    await _create_topics(namesrv, plain.address, PLAIN_TOPIC)
    await _create_topics(namesrv, guarded.address, ACL_TOPIC, credentials=ADMIN_ACCOUNT)

    def config(credentials: SessionCredentials | None) -> ClientConfig:
        return ClientConfig.create(
            namesrv,
            poll_name_server_interval=5.0,
            heartbeat_broker_interval=5.0,
            credentials=credentials,
        )

    producer_off = AsyncProducer("BenchAclOffPG", config=config(None))
    producer_on = AsyncProducer("BenchAclOnPG", config=config(BENCH_ACCOUNT))
    await producer_off.start()
    await producer_on.start()
    # (kind, ACL on) -> best rate, and least CPU (broker + client, us per message): CPU time is
    # what a loaded machine moves least. Kinds: "batched" and "single" through the producer,
    # "batched-api" and "single-api" through BrokerAPI.
    best: dict[tuple[str, bool], float] = {}
    least_cpu: dict[tuple[str, bool], float] = {}
    try:
        sides = (
            (False, off, producer_off, plain, PLAIN_TOPIC),
            (True, on, producer_on, guarded, ACL_TOPIC),
        )
        for _acl_on, api, producer, broker, topic in sides:
            # Warm up: topic creation, routes, connections.
            await _batched_sends(api, broker.address, 3200)
            await _producer_batched(producer, topic, 3200)
            await _producer_single_sends(producer, topic, 2000)
        for _round in range(ROUNDS):
            for acl, api, producer, broker, topic in sides:
                assert broker.pid is not None
                phases: tuple[tuple[str, int, Callable[[int], Awaitable[float]]], ...] = (
                    ("batched", messages, partial(_producer_batched, producer, topic)),
                    ("single", messages // 4, partial(_producer_single_sends, producer, topic)),
                    ("batched-api", messages, partial(_batched_sends, api, broker.address)),
                    ("single-api", messages // 4, partial(_single_sends, api, broker.address)),
                )
                for kind, count, phase in phases:
                    before = BrokerCpu.now(broker.pid)
                    rate = await phase(count)
                    cpu = BrokerCpu.now(broker.pid).per_message(before, count)
                    spent = cpu["broker_user"] + cpu["broker_system"] + cpu["client"]
                    best[kind, acl] = max(best.get((kind, acl), 0.0), rate)
                    least_cpu[kind, acl] = min(least_cpu.get((kind, acl), spent), spent)
    finally:
        await producer_off.shutdown()
        await producer_on.shutdown()
        await off.close()
        await on.close()
    results = []
    for kind, label in (
        ("batched", "batched sends (32 x 1 KiB)"),
        ("single", "single sends"),
        ("batched-api", "BrokerAPI batched sends"),
        ("single-api", "BrokerAPI single sends"),
    ):
        producer_path = not kind.endswith("-api")
        target = 0.95 if producer_path else None
        off_rate, on_rate = best[kind, False], best[kind, True]
        off_cpu, on_cpu = least_cpu[kind, False], least_cpu[kind, True]
        per_request = 32 if kind.startswith("batched") else 1
        floor = 2 * _hmac_us_per_message(_openssl_hmac(), per_request)
        own_floor = 2 * _hmac_us_per_message(signing_key(BENCH_ACCOUNT.secret_key), per_request)
        print(
            f"{label:<28} ACL off {off_rate:>9,.0f} msg/s {off_cpu:5.1f} us/msg   "
            f"ACL on {on_rate:>9,.0f} msg/s {on_cpu:5.1f} us/msg (CPU: broker + client)"
        )
        path = "AsyncProducer" if producer_path else "no producer work; the earlier figure"
        results += [
            Result(
                f"{label}: ACL on / ACL off",
                on_rate / off_rate,
                "x",
                target,
                note=f"{path}; off {off_rate:,.0f} msg/s, on {on_rate:,.0f} msg/s",
            ),
            Result(
                f"{label}: CPU per message, ACL on - off",
                on_cpu - off_cpu,
                "us",
                note=f"broker + client: off {off_cpu:.1f} us, on {on_cpu:.1f} us",
            ),
            # What the protocol's HMAC-SHA1 over every body alone costs, once in the client and
            # once in the broker: with both cores busy, ACL on cannot beat off / (off + this).
            Result(
                f"{label}: ACL on / off bound of the signature's HMAC alone",
                off_cpu / (off_cpu + floor),
                "x",
                note=(
                    f"HMAC-SHA1 of the signed content, client + broker: {floor:.2f} us/msg "
                    f"(OpenSSL's HMAC; tidemq's signing key: {own_floor:.2f})"
                ),
            ),
            # Issue 36: what ACL adds beyond the HMAC must stay small.
            Result(
                f"{label}: ACL on / off as a share of that bound",
                on_rate / off_rate / (off_cpu / (off_cpu + floor)),
                "x",
                target,
            ),
        ]
    return results


def _openssl_hmac() -> Mac:
    """The bench account's key as OpenSSL's HMAC object (_hashlib's, as `hmac.new` gives it):
    the bound's HMAC, whatever `signing_key` gives (compiled, tidemq's own _HmacSha1 copies its
    state without allocating, which _hashlib's does not; the bound stays the one issue 36 set)."""
    mac = hmac.new(BENCH_ACCOUNT.secret_key.encode("utf-8"), digestmod=hashlib.sha1)
    raw: Mac | None = getattr(mac, "_hmac", None)
    return raw if raw is not None else mac


def _hmac_us_per_message(key: Mac, messages_per_request: int) -> float:
    """CPU of one HMAC-SHA1 of a send's signed content (its ext values and 1 KiB bodies) with
    `key`, per message: the least of a few timed runs."""
    values = b"x" * 200  # the V2 header's values, about this long
    body = os.urandom(1024 * messages_per_request)

    def sign() -> None:
        mac = key.copy()
        mac.update(values)
        mac.update(body)
        mac.digest()

    runs = 2000
    best = min(timeit.repeat(sign, number=runs, repeat=5)) / runs
    return best / messages_per_request * 1e6


def _server_tls(pki: Pki, mode: str) -> tuple[str, ...]:
    return (
        f"tls.server.mode={mode}",
        f"tls.server.certPath={pki.server.cert}",
        f"tls.server.keyPath={pki.server.key}",
    )


async def _tls_pulls(broker: Daemon, pki: Pki, messages: int) -> list[Result]:
    plain = BrokerAPI()
    tls = BrokerAPI(tls=TlsClientSettings(trust_cert_path=str(pki.ca)).context())
    best = {False: 0.0, True: 0.0}
    try:
        await _batched_sends(plain, broker.address, messages)
        per_queue = min([await plain.get_max_offset(broker.address, TOPIC, q) for q in range(8)])
        for _round in range(ROUNDS):
            for over_tls, api in ((False, plain), (True, tls)):
                rate = await _pulls(api, broker.address, per_queue)
                best[over_tls] = max(best[over_tls], rate)
    finally:
        await plain.close()
        await tls.close()
    print(
        f"pulls (32 per request, {QUEUES} queues): plaintext {best[False]:,.0f} msg/s, "
        f"TLS {best[True]:,.0f} msg/s",
        flush=True,
    )
    return [
        Result(
            "pulls: TLS / plaintext",
            best[True] / best[False],
            "x",
            note=f"plaintext {best[False]:,.0f} msg/s, TLS {best[True]:,.0f} msg/s",
        )
    ]


async def _ha_catch_up(folder: Path, pki: Pki, backlog: int) -> list[Result]:
    group = ProcessGroup(folder / "logs")
    master_tls = (
        "haTlsEnable=true",
        f"haTlsCertPath={pki.server.cert}",
        f"haTlsKeyPath={pki.server.key}",
        f"haTlsTrustCertPath={pki.ca}",
    )
    slave_tls = (
        "haTlsEnable=true",
        f"haTlsCertPath={pki.client.cert}",
        f"haTlsKeyPath={pki.client.key}",
        f"haTlsTrustCertPath={pki.ca}",
    )
    try:
        namesrv = group.namesrvd(name="namesrvd")
        plain = await _catch_up(group, namesrv, folder, backlog, tag="plain")
        group.stop_all()  # one pair at a time on the disk and the cores
        group = ProcessGroup(folder / "logs-tls")
        namesrv = group.namesrvd(name="namesrvd")
        over_tls = await _catch_up(
            group,
            namesrv,
            folder,
            backlog,
            tag="tls",
            master_extra=master_tls,
            slave_extra=slave_tls,
        )
    finally:
        group.stop_all()
    print(
        f"HA catch-up of {backlog >> 20} MiB: plaintext {plain.mb_s:,.0f} MB/s, "
        f"TLS {over_tls.mb_s:,.0f} MB/s; slave CPU per GB receiving: "
        f"{plain.receive_cpu:.2f} s vs {over_tls.receive_cpu:.2f} s",
        flush=True,
    )
    return [
        Result(
            "HA catch-up: TLS / plaintext",
            over_tls.mb_s / plain.mb_s,
            "x",
            note=f"plaintext {plain.mb_s:,.0f} MB/s, TLS {over_tls.mb_s:,.0f} MB/s",
        )
    ]


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_SECURITY_MESSAGES", 64_000)
    backlog = env_int("TIDEMQ_BENCH_SECURITY_HA_MB", 256) * 1024 * 1024
    results: list[Result] = []
    with temp_dir("security") as folder:
        pki = make_pki(folder / "pki")
        with _brokers(folder) as (namesrv, plain, guarded):
            results += run_on_uvloop(_acl(namesrv.address, plain, guarded, messages))
        with one_broker("security-tls", *_server_tls(pki, "permissive")) as (_namesrv, broker):
            results += run_on_uvloop(_tls_pulls(broker, pki, messages))
        results += run_on_uvloop(_ha_catch_up(folder, pki, backlog))
    return results
