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
  permission look-up).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.bench import BROKER_SIZES, Result, env_int, run_on_uvloop, temp_dir
from tests.bench.broker_bench import _batched_sends, _single_sends
from tests.support.processes import Daemon, ProcessGroup
from tidemq.client.api import BrokerAPI
from tidemq.client.remoting.signing import SessionCredentials

ROUNDS = 3
BENCH_ACCOUNT = SessionCredentials("bench-account", "bench-secret")
ACL_FILE = f"""\
accounts:
  - accessKey: {BENCH_ACCOUNT.access_key}
    secretKey: {BENCH_ACCOUNT.secret_key}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [BenchTopic=PUB|SUB, TBW102=PUB|SUB]
"""


@contextlib.contextmanager
def _brokers(folder: Path) -> Iterator[tuple[Daemon, Daemon]]:
    """(ACL off, ACL on) brokers of one name server."""
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
        yield plain, guarded
    finally:
        group.stop_all()


async def _acl(plain: Daemon, guarded: Daemon, messages: int) -> list[Result]:
    off = BrokerAPI()
    on = BrokerAPI(credentials=BENCH_ACCOUNT)
    best: dict[tuple[str, bool], float] = {}
    try:
        for api, address in ((off, plain.address), (on, guarded.address)):
            await _batched_sends(api, address, 3200)  # warm up: topic creation, connections
        for _round in range(ROUNDS):
            for acl, api, address in ((False, off, plain.address), (True, on, guarded.address)):
                rates = {
                    "batched": await _batched_sends(api, address, messages),
                    "single": await _single_sends(api, address, messages // 4),
                }
                for kind, rate in rates.items():
                    best[kind, acl] = max(best.get((kind, acl), 0.0), rate)
    finally:
        await off.close()
        await on.close()
    results = []
    for kind, label in (("batched", "batched sends (32 x 1 KiB)"), ("single", "single sends")):
        off_rate, on_rate = best[kind, False], best[kind, True]
        print(f"{label:<32} ACL off {off_rate:>10,.0f} msg/s   ACL on {on_rate:>10,.0f} msg/s")
        results.append(
            Result(
                f"{label}: ACL on / ACL off",
                on_rate / off_rate,
                "x",
                0.95,
                note=f"off {off_rate:,.0f} msg/s, on {on_rate:,.0f} msg/s",
            )
        )
    return results


def run() -> list[Result]:
    messages = env_int("TIDEMQ_BENCH_SECURITY_MESSAGES", 64_000)
    with temp_dir("security") as folder, _brokers(folder) as (plain, guarded):
        return run_on_uvloop(_acl(plain, guarded, messages))
