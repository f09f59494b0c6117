"""Config tables survive a process killed in the middle of a change (managers/table_store.py).

A writer process (config_table_writer.py) works on a large topic table (20,000 topics imported
from a topics.json) and acknowledges each change once it returned; it is SIGKILLed at random
moments, many of them inside a batch of 2,000 topics (one transaction). After each kill the
tables are loaded as a restarting broker loads them, and:

- every acknowledged topic, batch and offset is there (no committed change lost; an offset
  may be larger: one committed but killed before its ACK);
- a batch in flight at the kill is there whole or not at all (a transaction is atomic);
- the table still loads: nothing torn, the import is not repeated.

What it cannot see: a power loss (the kill leaves the page cache to the kernel); SQLite's
fsync ordering under one is its own tested guarantee (synchronous=FULL in WAL mode).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from tests.fault.config_table_writer import BROKER
from tests.support.conditions import eventually_sync
from tidemq.broker.managers.config_file import pretty_json
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.topic_config import TopicConfigManager

WRITER = Path(__file__).with_name("config_table_writer.py")
REPO = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("CONFIG_CRASH_SEED", "34"))
ROUNDS = 6
IMPORTED = 20_000


def complete_lines(path: Path) -> list[str]:
    complete, _sep, _partial = path.read_text().rpartition("\n")
    return complete.splitlines() if complete else []


def write_topics_json(config_dir: Path) -> None:
    config_dir.mkdir(parents=True)
    table = {
        f"Imported{i}": {"topicName": f"Imported{i}", "readQueueNums": 8, "writeQueueNums": 8}
        for i in range(IMPORTED)
    }
    (config_dir / "topics.json").write_text(pretty_json({"topicConfigTable": table}))


def run_and_kill(
    config_dir: Path, round_no: int, out: Path, err: Path, acks: int, in_batch: bool
) -> None:
    with out.open("wb") as stdout, err.open("wb") as stderr:
        command = [sys.executable, str(WRITER), str(config_dir), "--round", str(round_no)]
        proc = subprocess.Popen([*command, "--seed", str(SEED)], stdout=stdout, stderr=stderr)
    try:

        def ready() -> bool:
            assert proc.poll() is None, f"writer exited early: {err.read_text()}"
            lines = complete_lines(out)
            if sum(line.startswith("ACK ") for line in lines) < acks:
                return False
            return not in_batch or lines[-1].startswith("BEGIN ")

        eventually_sync(ready, f"{acks} acknowledgements", 60.0, interval=0.001)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigkilled_writers_lose_no_committed_change(tmp_path: Path) -> None:
    config_dir = tmp_path / "config"
    write_topics_json(config_dir)
    rng = random.Random(SEED)
    acked_topics: set[str] = set()
    acked_batches: list[tuple[int, int, int]] = []
    acked_offsets: dict[tuple[str, int], int] = {}
    in_flight: list[tuple[int, int, int]] = []
    killed_in_batch = 0
    for round_no in range(ROUNDS):
        out, err = tmp_path / f"out{round_no}", tmp_path / f"err{round_no}"
        # Odd rounds are killed right after a batch began: inside its transaction.
        run_and_kill(config_dir, round_no, out, err, rng.randrange(1, 30), round_no % 2 == 1)
        lines = complete_lines(out)
        killed_in_batch += lines[-1].startswith("BEGIN ")
        for line in complete_lines(out):
            word, kind, *rest = line.split(" ")
            if word == "ACK" and kind == "topic":
                acked_topics.add(rest[0])
            elif word == "ACK" and kind == "batch":
                acked_batches.append((int(rest[0]), int(rest[1]), int(rest[2])))
            elif word == "BEGIN":
                in_flight.append((int(rest[0]), int(rest[1]), int(rest[2])))
            elif word == "ACK" and kind == "offset":
                acked_offsets[(rest[0], int(rest[1]))] = int(rest[2])
        # What a restarting broker reads.
        topics = TopicConfigManager(config_dir, BROKER)
        offsets = ConsumerOffsetManager(config_dir)
        assert topics.load() and offsets.load()
        assert f"Imported{IMPORTED - 1}" in topics
        missing = sorted(t for t in acked_topics if t not in topics)
        assert not missing, f"round {round_no}: acknowledged topics lost: {missing[:5]}"
        for r, index, size in acked_batches:
            assert all(f"B{r}-{index}-{j}" in topics for j in range(size)), (r, index)
        for r, index, size in in_flight:
            present = sum(f"B{r}-{index}-{j}" in topics for j in range(size))
            assert present in (0, size), f"batch {r}-{index} torn: {present} of {size}"
        snapshot = offsets.snapshot()
        for (key, queue), offset in acked_offsets.items():
            # Offsets only grow within a round: one stored but killed before its ACK is larger.
            assert snapshot.get(key, {}).get(queue, -1) >= offset, (key, queue, offset)
        topics.close()
        offsets.close()
    # The database was imported once and is the only source now.
    assert json.loads((config_dir / "topics.json").read_text())["topicConfigTable"].keys() == {
        f"Imported{i}" for i in range(IMPORTED)
    }
    assert acked_topics and acked_batches
    assert killed_in_batch > 0  # some kills did land inside a batch's transaction
