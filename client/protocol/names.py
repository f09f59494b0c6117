"""The rules for names that become paths, file names, table keys or topics: one place.

- topic: `[%|a-zA-Z0-9_-]`, 1..127 characters (RocketMQ's TopicValidator.validateTopic).
- group: the same characters, 1..255 (RocketMQ's client Validators.checkGroup).
- consumer group: a group whose `%RETRY%<group>` and `%DLQ%<group>` topics, which the broker
  derives from it, are topics too (so at most 120 characters).
- kv and broker: `[%|a-zA-Z0-9_.:-]`, 1..255, not only dots (tidemq's: RocketMQ checks none):
  namespaces and keys of the name server's KV table, broker and cluster names and the topics
  of registrations (a broker's own topic is its name, by default the host's, dots included);
  `.` and `:` for the addresses some of them are.

None of these characters is a path separator, and no name of them is `.` or `..` (topics and
groups have no dot at all; a kv or broker name made only of dots is refused), so a valid name
is always one path segment. `name_problem(kind, value)` is None for a valid name, else the
remark that says why, in RocketMQ's words where RocketMQ has them.
"""

from __future__ import annotations

import enum
import re
from typing import Final

TOPIC_MAX_LENGTH: Final = 127
GROUP_MAX_LENGTH: Final = 255
OTHER_MAX_LENGTH: Final = 255
RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
VALID_PATTERN: Final = "^[%|a-zA-Z0-9_-]+$"

_VALID_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
_VALID_OTHER: Final = re.compile(r"[%|a-zA-Z0-9_.:-]+")
_ONLY_DOTS: Final = re.compile(r"\.+")


class NameKind(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    # A consumer group the broker derives %RETRY% and %DLQ% topics from.
    CONSUMER_GROUP = "consumer group"
    KV = "kv"
    BROKER = "broker"


def topic_problem(topic: str) -> str | None:
    """None when `topic` is a valid topic name, else RocketMQ's remark."""
    if not topic.strip():
        return "The specified topic is blank."
    if not _VALID_NAME.fullmatch(topic):
        return f"The specified topic contains illegal characters, allowing only {VALID_PATTERN}"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def group_problem(group: str) -> str | None:
    """None when `group` is a valid group name, else RocketMQ's remark (Validators.checkGroup)."""
    if not group.strip():
        return "the specified group is blank"
    if not _VALID_NAME.fullmatch(group):
        return f"the specified group contains illegal characters, allowing only {VALID_PATTERN}"
    if len(group) > GROUP_MAX_LENGTH:
        return f"the specified group is longer than group max length {GROUP_MAX_LENGTH}."
    return None


def consumer_group_problem(group: str) -> str | None:
    """As `group_problem`, and the retry and dead-letter topics derived from it must be topics
    (a longer group could never have a retry delivered: its %RETRY% topic is no topic)."""
    problem = group_problem(group)
    if problem is None and len(RETRY_GROUP_TOPIC_PREFIX) + len(group) > TOPIC_MAX_LENGTH:
        longest = TOPIC_MAX_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX)
        problem = (
            f"the specified group is longer than {longest}: its retry topic "
            f"{RETRY_GROUP_TOPIC_PREFIX}<group> would be longer than topic max length "
            f"{TOPIC_MAX_LENGTH}."
        )
    return problem


def other_problem(name: str, what: str) -> str | None:
    if not name:
        return f"the specified {what} is blank"
    if not _VALID_OTHER.fullmatch(name) or _ONLY_DOTS.fullmatch(name):
        return (
            f"the specified {what} contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_.:-]+$ (and not only dots)"
        )
    if len(name) > OTHER_MAX_LENGTH:
        return f"the specified {what} is longer than {OTHER_MAX_LENGTH} characters."
    return None


def name_problem(kind: NameKind, value: str) -> str | None:
    """None when `value` is a valid name of `kind`, else why not."""
    if kind is NameKind.TOPIC:
        return topic_problem(value)
    if kind is NameKind.GROUP:
        return group_problem(value)
    if kind is NameKind.CONSUMER_GROUP:
        return consumer_group_problem(value)
    if kind is NameKind.KV:
        return other_problem(value, "name")
    return other_problem(value, "broker or cluster name")
