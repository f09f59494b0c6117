"""The soak's check of a slave's files catches a slave that acknowledges before it stores
(issue 32: "a slave that acknowledged before storing would pass").

A SYNC_MASTER and its SLAVE on real processes; the slave reaches the master's HA port through
tests/support/early_ack_proxy.py. Sends to the master are recorded (tests/support/history.py)
until 200 were answered SEND_OK; the slave is SIGKILLed at once (the page cache, and so what it
wrote, is kept), and its CommitLog files are read as a final read of the history and judged,
exactly as the soak judges them at a strike (tests/fault/soak.py: `record_store_read`, `check`).

- `real`: the proxy relays both ways unchanged; the slave acknowledges what it appended, so
  every acknowledged message is in its files: the check passes.
- `early`: the proxy acknowledges each frame to the master at once and hands it to the slave
  2 s later, as a slave that reported an offset before writing it would: the check fails
  (acknowledged messages missing from the slave's files, the `lost` rule).

What it cannot see: a slave that wrote but would lose what it wrote in a power cut (SYNC_MASTER
promises the slave received the message, not that it synced it: tests/fault/soak.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fault.soak import BROKER_NAME, QUEUES, TOPIC, record_store_read
from tests.support.early_ack_proxy import EarlyAckProxy
from tests.support.ha_processes import body_of, start_master, start_slave, wait_transfer
from tests.support.history import Recorder, check, record_send
from tests.support.processes import LOOPBACK, Daemon, ProcessGroup
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI

ACKNOWLEDGED = 200
IN_FLIGHT = 8


@pytest.mark.parametrize("slave", ["real", "early"])
async def test_the_slave_files_check_catches_a_slave_that_acknowledges_before_storing(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    api: BrokerAPI,
    recorder: Recorder,
    slave: str,
) -> None:
    master, ha_port = start_master(processes, namesrv, tmp_path / "master", "slaveTimeout=10000")
    proxy = EarlyAckProxy(LOOPBACK, ha_port, early=slave == "early", hold=2.0)
    await proxy.start()
    try:
        follower = start_slave(
            processes, namesrv, tmp_path / "slave", f"haMasterAddress={proxy.address}"
        )
        await wait_transfer(api, master, timeout=30)
        acknowledged = 0
        numbers = iter(range(10**6))

        async def sender() -> None:
            nonlocal acknowledged
            while acknowledged < ACKNOWLEDGED:
                number = next(numbers)
                header = send_header(TOPIC, number % QUEUES)
                body = body_of(number, 100 + number % 900)
                sent = await record_send(
                    recorder, api, master.address, header, body, broker_name=BROKER_NAME
                )
                acknowledged += sent.status.name == "SEND_OK"

        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
        follower.kill()  # at once: the early proxy still holds the last 2 s of frames
        record_store_read(recorder, tmp_path / "slave")
        judged = check(recorder.events)
    finally:
        await proxy.close()
    print(f"{slave} slave: proxy made up {proxy.acked_early} acknowledgements\n{judged.summary()}")
    assert judged.counts["acknowledged"] >= ACKNOWLEDGED
    if slave == "real":
        assert proxy.acked_early == 0
        assert judged.ok, judged.summary()
    else:
        assert proxy.acked_early > 0
        assert not judged.ok and judged.violations["lost"], judged.summary()
        assert judged.counts["lost"] > 0
