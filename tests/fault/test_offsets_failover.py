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
from tidemq.broker.managers.consumer_offset import OffsetTable, parse_offset_table
from tidemq.client.admin.api import AdminClient
from tidemq.client.api import BrokerAPI, SendStatus
from tidemq.client.errors import TideMQError
from tidemq.client.remoting.codes import RequestCode

TOPIC: Final = "OffsetTopic"
GROUP: Final = "broker-a"  # the brokers' name (tests/support/failover.py)
CONSUMERS: Final = "offset-group"
PULLERS: Final = "pull-group"
NO_TABLE_COPY: Final = "slaveSynchronizeInterval=60000"
DOOMED: Final = "DoomedTopic"  # deleted with its offsets
GONE: Final = "gone-group"  # deleted with its offsets
CLONE: Final = "clone-group"  # given CONSUMERS' offsets


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


async def test_admin_offset_changes_survive_a_failover(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    etcd: EtcdCluster,
    api: BrokerAPI,
) -> None:
    """An admin's offset reset, clone, and removals (a subscription group deleted with its
    offsets, a topic deleted) go through the CommitLog too: each answered by the master, the
    master SIGKILLed right after the last, the elected slave answers what the master did. A
    slave refuses a reset and a clone in controller mode. Before they went through the log, the
    new master answered the offsets of before the changes (its table is copied once a minute
    here): 3 for the reset group, none for the clone, the removed offsets still there."""
    first = start_member(processes, namesrv, etcd.endpoints, tmp_path, 1, NO_TABLE_COPY)
    assert await wait_master(api, [first], 30) is first
    second = start_member(processes, namesrv, etcd.endpoints, tmp_path, 2, NO_TABLE_COPY)
    await wait_sync_state_set(api, first, [1, 2])
    for number in range(8):
        sent = await api.send(first.address, send_header(TOPIC, 0), body_of(number, 100))
        assert sent.status is SendStatus.SEND_OK
    sent = await api.send(first.address, send_header(DOOMED, 0), body_of(100, 100))
    assert sent.status is SendStatus.SEND_OK
    await api.update_consumer_offset(first.address, CONSUMERS, TOPIC, 0, 3)
    await api.update_consumer_offset(first.address, GONE, TOPIC, 0, 5)
    await api.update_consumer_offset(first.address, CONSUMERS, DOOMED, 0, 1)
    async with AdminClient(namesrv.address) as admin:
        with pytest.raises(TideMQError, match="slave in controller mode"):
            await admin.reset_offset(second.address, TOPIC, CONSUMERS, -1)
        with pytest.raises(TideMQError, match="slave in controller mode"):
            await admin.clone_group_offset(second.address, CONSUMERS, CLONE, TOPIC, True)
        reset = await admin.reset_offset(first.address, TOPIC, CONSUMERS, -1)  # to the end
        assert {mq.queue_id: offset for mq, offset in reset.items()}[0] == 8
        await admin.clone_group_offset(first.address, CONSUMERS, CLONE, TOPIC, True)
        await admin.delete_subscription_group(first.address, GONE, clean_offset=True)
        await admin.delete_topic_in_broker(first.address, DOOMED)
    first.kill()
    assert await wait_master(api, [second], 30) is second
    table = await _offset_table(api, second)
    answers = {
        "reset": table.get(f"{TOPIC}@{CONSUMERS}", {}).get(0),
        "clone": table.get(f"{TOPIC}@{CLONE}", {}).get(0),
        "group removed": table.get(f"{TOPIC}@{GONE}"),
        "topic removed": table.get(f"{DOOMED}@{CONSUMERS}"),
    }
    assert answers == {"reset": 8, "clone": 8, "group removed": None, "topic removed": None}
    assert await api.query_consumer_offset(second.address, CONSUMERS, TOPIC, 0) == 8


async def _offset_table(api: BrokerAPI, broker: Daemon) -> OffsetTable:
    """The broker's consumer offset table (GET_ALL_CONSUMER_OFFSET): QUERY_CONSUMER_OFFSET
    answers 0, not none, for a group without an offset of a young queue (RocketMQ's rule)."""
    response = await api.call(broker.address, api.request(RequestCode.GET_ALL_CONSUMER_OFFSET))
    return parse_offset_table(bytes(response.body))
