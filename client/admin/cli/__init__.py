"""`mqadmin`: RocketMQ's admin command line for tidemq (click).

Subcommands keep RocketMQ's names, flags and output columns (rocketmq-reference.md Part B §1);
`--json` prints the same data for scripts, with camelCase keys. The modules register their
commands on `main`, one module per area.
"""

from tidemq.client.admin.cli import (
    cluster,
    controller,
    group,
    message,
    namesrv,
    print_messages,
    rocketmq5,
    send_check,
    stats,
    topic,
    trace,
)
from tidemq.client.admin.cli.base import main

__all__ = [
    "cluster",
    "controller",
    "group",
    "main",
    "message",
    "namesrv",
    "print_messages",
    "rocketmq5",
    "send_check",
    "stats",
    "topic",
    "trace",
]
