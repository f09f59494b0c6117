"""`tidemq-ingest` asks the name servers before Spark starts (client/spark/ingest.py).

Against a real name server and broker: a topic without a route is warned about (the query
would otherwise read 0 rows and exit 0 in silence), one with a route is not; a wrong name
server stops the command with one line naming it and exit status 1, before Spark starts (no
Java needed for these).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from io import StringIO
from pathlib import Path

from tests.support.conditions import eventually_sync
from tests.support.processes import ProcessGroup, free_port
from tidemq.client.admin.api import AdminClient
from tidemq.client.errors import TopicNotExistError
from tidemq.client.message import Message
from tidemq.client.producer import Producer
from tidemq.client.spark.ingest import preflight


def routed(namesrv: str, topic: str) -> bool:
    async def ask() -> bool:
        async with AdminClient(namesrv) as admin:
            try:
                await admin.topic_route(topic)
            except TopicNotExistError:
                return False
            return True

    return asyncio.run(ask())


def test_a_topic_that_does_not_exist_is_warned_about(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    namesrv = processes.namesrvd()
    processes.brokerd(namesrv.address, tmp_path / "store")
    with Producer("ingest-preflight-pg", namesrv.address) as producer:
        producer.send(Message("IngestThere", b"x"))
    # A topic created by its first send reaches the name server with the broker's registration.
    eventually_sync(lambda: routed(namesrv.address, "IngestThere"), "IngestThere's route", 30)
    out = StringIO()
    assert preflight({"namesrvAddr": namesrv.address, "topic": "IngestThere, NoSuchTopic"}, out)
    assert out.getvalue().splitlines() == [
        f"tidemq-ingest: warning: topic NoSuchTopic does not exist (no route on "
        f"{namesrv.address}); nothing is read from it until it is created"
    ]


def test_a_wrong_name_server_prints_one_line_and_exits_1(tmp_path: Path) -> None:
    wrong = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "tidemq.client.spark.ingest", "-n", wrong, "-t", "T",
         "-o", str(tmp_path / "out"), "-c", str(tmp_path / "checkpoint"), "--available-now"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"tidemq-ingest: name server {wrong}: cannot connect to {wrong}: [Errno 111] Connect "
        f"call failed ('127.0.0.1', {wrong.rpartition(':')[2]})"
    ]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "checkpoint").exists()
