"""Committed consumer offsets across failovers in controller mode (issue 32), on real processes:
etcd, namesrvd and two brokerd of one group (SYNC_MASTER, allAckInSyncStateSet).

Every commit and committed-offset read is in one history (tests/support/history.py,
`record_commit` / `record_committed`) judged by the offsets rule across epochs: no committed
read below a commit the broker acknowledged, or a read that finished, before it began.
SlaveSynchronize runs once a minute here (`slaveSynchronizeInterval=60000`), so that only the
CommitLog can have carried the commits to the slave: before broker/offset_log.py the new master
answered the offsets of its last copy (none: -1, the group starts over).
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Final

import pytest

from tests.support.conditions import eventually
from tests.support.etcd import EtcdCluster
from tests.support.failover import controller, start_member, wait_master, wait_sync_state_set
from tests.support.ha_processes import as_int, body_of
from tests.support.history import (
    Recorder,
    check,
    record_commit,
    record_committed,
    record_read,
    record_send,
)
from tests.support.processes import Daemon, ProcessGroup
from tests.support.wire import pull_header, send_header
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.errors import TideMQError

TOPIC: Final = "OffsetTopic"
GROUP: Final = "broker-a"  # the brokers' name (tests/support/failover.py)
CONSUMERS: Final = "offset-group"
PULLERS: Final = "pull-group"
NO_TABLE_COPY: Final = "slaveSynchronizeInterval=60000"


async def _epoch(recorder: Recorder, api: BrokerAPI, broker: Daemon) -> None:
    info = await controller(api, broker)
    recorder.epoch(broker.address, int(info["epoch"]), as_int(info["electedAtMillis"]) / 1000)


async def test_an_acknowledged_commit_survives_two_failovers(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd: EtcdCluster,
    api: BrokerAPI,
    recorder: Recorder,
) -> None:
    """Commits acknowledged by the master, the master SIGKILLed right after the last: the slave
    is elected and answers the last acknowledged offset, and the offset another group committed
    with a pull, which the old master had answered. A commit on the new master, the old one
    restarted (it applies the log it replicates, after a restart) and the new one killed: the
    old one, elected again, answers that commit. A slave refuses commits in controller mode (it
    could not keep them)."""
    first = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, NO_TABLE_COPY)
    assert await wait_master(api, [first], 30) is first
    await _epoch(recorder, api, first)
    second = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, NO_TABLE_COPY)
    await wait_sync_state_set(api, first, [1, 2])
    for number in range(8):
        sent = await record_send(
            recorder, api, first.address, send_header(TOPIC, 0), body_of(number, 100),
            broker_name=GROUP,
        )  # fmt: skip
        assert sent.status is SendStatus.SEND_OK
    with pytest.raises(TideMQError, match="slave in controller mode"):
        await api.update_consumer_offset(second.address, CONSUMERS, TOPIC, 0, 5)

    def commit(broker: Daemon, offset: int) -> Awaitable[None]:
        return record_commit(recorder, api, broker.address, CONSUMERS, TOPIC, GROUP, 0, offset)

    def committed(broker: Daemon) -> Awaitable[int]:
        return record_committed(recorder, api, broker.address, CONSUMERS, TOPIC, GROUP, 0)

    for offset in range(1, 8):
        await commit(first, offset)
    assert await committed(first) == 7
    # A pull's piggybacked commit (PULL_FLAG_COMMIT_OFFSET) goes through the log too, unanswered:
    # once the master answers it, the next master must as well.
    await api.pull(first.address, pull_header(TOPIC, 0, 6, commit=6, group=PULLERS))

    async def pulled_commit_applied() -> bool:
        read = record_committed(recorder, api, first.address, PULLERS, TOPIC, GROUP, 0)
        return await read == 6

    await eventually(pulled_commit_applied, "the pull's commit applied on the master", 15)
    first.kill()
    assert await wait_master(api, [second], 30) is second
    await _epoch(recorder, api, second)
    assert await committed(second) == 7, "the new master lost an acknowledged commit"
    pulled = await record_committed(recorder, api, second.address, PULLERS, TOPIC, GROUP, 0)
    assert pulled == 6, "the new master lost a commit the old one had answered"
    await commit(second, 8)

    first = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, NO_TABLE_COPY)
    await wait_sync_state_set(api, second, [1, 2])
    second.kill()
    assert await wait_master(api, [first], 30) is first
    await _epoch(recorder, api, first)
    assert await committed(first) == 8, "the restarted member lost a commit it replicated"
    await record_read(recorder, api, first.address, TOPIC, GROUP, 1)
    judged = check(recorder.events)
    print(judged.summary())
    assert judged.ok, judged.summary()
    assert judged.counts["committed_reads"] >= 5
