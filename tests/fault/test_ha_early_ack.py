"""The soak's check of a slave's files catches a slave that acknowledges before it stores
(issue 32: "a slave that acknowledged before storing would pass").

A SYNC_MASTER and its SLAVE on real processes; the slave reaches the master's HA port through
tests/support/early_ack_proxy.py. In each phase sends to the master are recorded
(tests/support/history.py) until 200 were answered SEND_OK, then the slave's CommitLog files are
read as a final read of the history and judged, exactly as the soak judges them at a strike
(tests/support/store_history.py: `files_hold_acked`); at the end the slave is SIGKILLed first
(its page cache, and so what it wrote, is kept).

- first the proxy relays both ways unchanged; the slave acknowledges what it appended, so
  every acknowledged message is in its files: the check passes;
- then the proxy acknowledges each frame to the master at once and hands it to the slave 2 s
  later, as a slave that reported an offset before writing it would: the check fails
  (acknowledged messages of this phase missing from the slave's files, the `lost` rule), and
  only messages of this phase are missing.

What it cannot see: a slave that wrote but would lose what it wrote in a power cut (SYNC_MASTER
promises the slave received the message, not that it synced it: tests/fault/soak.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.fault.soak import BROKER_NAME, QUEUES, TOPIC
from tests.support.early_ack_proxy import EarlyAckProxy
from tests.support.ha_processes import body_of, start_master, start_slave, wait_transfer
from tests.support.history import Recorder, record_send
from tests.support.processes import LOOPBACK, Daemon, ProcessGroup
from tests.support.store_history import files_hold_acked
from tests.support.wire import send_header
from tidemq.client.api import BrokerAPI

ACKNOWLEDGED = 200  # per phase
IN_FLIGHT = 8


async def test_the_slave_files_check_catches_a_slave_that_acknowledges_before_storing(
    tmp_path: Path,
    processes: ProcessGroup,
    namesrv: Daemon,
    api: BrokerAPI,
    recorder: Recorder,
) -> None:
    """One pair, two phases (one start-up for both): the relay honest, then lying."""
    master, ha_port = start_master(processes, namesrv, tmp_path / "master", "slaveTimeout=10000")
    proxy = EarlyAckProxy(LOOPBACK, ha_port, early=False, hold=2.0)
    await proxy.start()
    numbers = iter(range(10**6))

    async def send_until_acknowledged(count: int) -> None:
        acknowledged = 0

        async def sender() -> None:
            nonlocal acknowledged
            while acknowledged < count:
                number = next(numbers)
                header = send_header(TOPIC, number % QUEUES)
                body = body_of(number, 100 + number % 900)
                sent = await record_send(
                    recorder, api, master.address, header, body, broker_name=BROKER_NAME
                )
                acknowledged += sent.status.name == "SEND_OK"

        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))

    try:
        slave = start_slave(
            processes, namesrv, tmp_path / "slave", f"haMasterAddress={proxy.address}"
        )
        await wait_transfer(api, master, timeout=30)
        # The real slave: it acknowledged what it appended, so its files hold all of it.
        await send_until_acknowledged(ACKNOWLEDGED)
        real = files_hold_acked(recorder, tmp_path / "slave", TOPIC, BROKER_NAME)
        print(f"real slave:\n{real.summary()}")
        assert proxy.acked_early == 0
        assert real.ok and real.counts["acknowledged"] >= ACKNOWLEDGED, real.summary()

        # The same slave behind a relay that acknowledges before the slave has the bytes.
        proxy.early = True
        await send_until_acknowledged(ACKNOWLEDGED)
        slave.kill()  # at once: the relay still holds the last 2 s of frames
        early = files_hold_acked(recorder, tmp_path / "slave", TOPIC, BROKER_NAME)
    finally:
        await proxy.close()
    print(f"early slave: {proxy.acked_early} acknowledgements made up\n{early.summary()}")
    assert proxy.acked_early > 0
    assert not early.ok and early.violations["lost"], early.summary()
    assert 0 < early.counts["lost"] <= early.counts["acknowledged"] - real.counts["acknowledged"]
