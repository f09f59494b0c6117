"""A store writer for tests/fault/test_new_queues_power_cut.py: one message to each of many new
ConsumeQueues, then one thorough flush pass, then it waits to be killed.

    python tests/fault/new_queues_writer.py STORE_DIR QUEUES

Prints `FLUSHED <syncfs passes>` once the pass returned (the count of passes that one syncfs
covered, from store/flushing.py), flushed at once, then sleeps until it is killed (the power cut
must find the store's files as a running broker leaves them).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from unittest import mock

from tests.support.stores import StoreFactory
from tidemq.store import flushing
from tidemq.store.commitlog import PutStatus
from tidemq.store.record import MessageToStore, encode_properties

STORES = StoreFactory(mapped_file_size_consume_queue=20 * 60)


def topic_of(queue: int) -> str:
    return f"New{queue}"


async def main(root: Path, queues: int) -> None:
    covered: list[int] = []
    real = flushing.sync_file_system_once

    def counting(queue_list: list[object]) -> int:
        count = real(queue_list)  # type: ignore[arg-type]
        covered.append(count)
        return count

    store = STORES.open(root)
    await store.start()
    props = encode_properties({})
    for queue in range(queues):
        msg = MessageToStore(topic_of(queue), 0, f"body-{queue}".encode(), props)
        assert (await store.put_message(msg)).status is PutStatus.PUT_OK
    await store.reput.wait_idle()
    with mock.patch.object(flushing, "sync_file_system_once", counting):
        await store.flusher.flush_consume_queues(0, one_syncfs=True)
    print(f"FLUSHED {sum(1 for count in covered if count)}", flush=True)
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
