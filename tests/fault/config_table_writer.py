"""A config-table writer process for the crash test: changes topics and offsets, acknowledging each
committed change, until it is killed.

    python tests/fault/config_table_writer.py CONFIG_DIR --round R --seed S [--batch N]

Loads the topic and consumer-offset tables of CONFIG_DIR as a broker does (importing
`topics.json` the first time), prints `READY <topics>`, then repeats, chosen by the seed:

- one topic created (`update`, as UPDATE_AND_CREATE_TOPIC): `ACK topic <name>`;
- a batch of N topics (`update_many`, as UPDATE_AND_CREATE_TOPIC_LIST), announced first with
  `BEGIN batch <R> <i> <N>`, then `ACK batch <R> <i> <N>` once it returned;
- an offset committed and persisted: `ACK offset <topic@group> <queue> <offset>`.

Each line is written after the change returned (and so was committed) and flushed at once. A
change whose write failed exits with status 2 (nothing must be acknowledged that was not stored).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from tidemq.broker.config import BrokerConfig
from tidemq.broker.managers.consumer_offset import ConsumerOffsetManager
from tidemq.broker.managers.topic_config import TopicConfigManager
from tidemq.client.protocol.models import TopicConfig

BROKER = BrokerConfig(broker_cluster_name="CrashCluster", broker_name="crash-broker")


def batch_topic(round_no: int, index: int, j: int) -> str:
    return f"B{round_no}-{index}-{j}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config_dir", type=Path)
    parser.add_argument("--round", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    rng = random.Random(args.seed * 1000 + args.round)
    topics = TopicConfigManager(args.config_dir, BROKER)
    offsets = ConsumerOffsetManager(args.config_dir)
    topics.load()
    offsets.load()
    print(f"READY {len(topics)}", flush=True)
    step = 0
    while True:
        step += 1
        choice = rng.random()
        if choice < 0.5:
            name = f"S{args.round}-{step}"
            topics.update(TopicConfig(name, 8, 8))
            if topics.take_changes():  # a failed write leaves its row to retry
                sys.exit(2)
            print(f"ACK topic {name}", flush=True)
        elif choice < 0.75:
            print(f"BEGIN batch {args.round} {step} {args.batch}", flush=True)
            topics.update_many(
                TopicConfig(batch_topic(args.round, step, j), 8, 8) for j in range(args.batch)
            )
            if topics.take_changes():
                sys.exit(2)
            print(f"ACK batch {args.round} {step} {args.batch}", flush=True)
        else:
            queue, offset = rng.randrange(4), args.round * 1_000_000 + step
            offsets.commit("writer", "g", f"S{args.round}", queue, offset)
            offsets.persist()
            print(f"ACK offset S{args.round}@g {queue} {offset}", flush=True)


if __name__ == "__main__":
    main()
