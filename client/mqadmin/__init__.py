"""`mqadmin`: RocketMQ's admin command line for tidemq (click).

Subcommands keep RocketMQ's names, flags and output columns (rocketmq-reference.md Part B §1);
`--json` prints the same data for scripts. The modules register their commands on `main`.
"""

from tidemq.client.mqadmin import cluster, controller, group, message, topic
from tidemq.client.mqadmin.base import main

__all__ = ["cluster", "controller", "group", "main", "message", "topic"]
