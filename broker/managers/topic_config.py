"""The broker's topic table (RocketMQ's TopicConfigManager): table `topics` of
`config/tables.db`, imported from and exported to `config/topics.json` (config_file.py).

One row per topic (its TopicConfig as JSON); a change writes that row and the DataVersion.

File format: a TopicConfigSerializeWrapper, as RocketMQ writes it::

    {"topicConfigTable": {"TopicTest": {"topicName": "TopicTest", "readQueueNums": 4,
                                        "writeQueueNums": 4, "perm": 6,
                                        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                        "order": false}, ...},
     "dataVersion": {"timestamp": 1700000000000, "counter": 3}}

The same object is the body of a broker's registration with the name servers and of
GET_ALL_TOPIC_CONFIG (21). Every change bumps the DataVersion (name servers only rebuild a
broker's routes when it changes; slaves only copy the table when it differs), is persisted at
once, and is reported to `on_change` so the broker can re-register.

Loading a million rows: the rows of `tables.db` in the shape this manager writes them (checked
by SQLite in the same read, `LAZY_ROW_SQL`) are kept as their JSON text and decoded into a
TopicConfig at first use, so a start reads the table without making an object per topic, and a
full registration sends those texts as they are (`json_rows`). Other rows (written by hand or by
an older version) are decoded, checked and renamed at load as before.

At construction the system topics of RocketMQ 4.9.7 are put in the table, then `load()` lays the
file over them (the file wins, as in RocketMQ): SELF_TEST_TOPIC (1 queue), TBW102 when
autoCreateTopicEnable (defaultTopicQueueNums queues, perm RW+INHERIT), BenchmarkTest (1024), the
cluster-name topic (16; RW+INHERIT when clusterTopicEnable, else INHERIT only), the broker-name
topic (1; likewise with brokerTopicEnable), OFFSET_MOVED_EVENT (1), SCHEDULE_TOPIC_XXXX (one
queue per delay level) and `<cluster>_REPLY_TOPIC` (1). The trace topic is not created (tidemq
has no trace switch).
"""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from tidemq.broker.config import BrokerConfig
from tidemq.broker.managers.config_file import (
    CONFIG_FILE_MAX_SIZE,
    DECODE_ERRORS,
    TOPICS_FILE,
    ConfigManager,
    compact_json,
    decode_json_object,
    decode_rows,
    pretty_json,
    with_valid_names,
)
from tidemq.client.protocol.models import (
    PERM_INHERIT,
    PERM_READ_WRITE,
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from tidemq.client.protocol.names import topic_problem
from tidemq.client.remoting.json_body import DEFAULT_MAX_BODY_SIZE
from tidemq.store.timer_message import TIMER_TOPIC

__all__ = [
    "AUTO_CREATE_TOPIC_KEY_TOPIC",
    "TopicChange",
    "TopicConfigChanged",
    "TopicConfigManager",
    "is_not_allowed_send_topic",
    "parse_topic_wrapper",
    "validate_topic_name",
]

log = logging.getLogger(__name__)

AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
DEFAULT_DELAY_LEVELS: Final = 18

# The rows of tables.db kept as text at load (`TopicConfigManager.read_rows`): a value in the shape
# `compact_json(TopicConfig.to_dict())` writes, naming its key. SQLite checks it as it reads, in one
# GLOB (about 1.5 us a row; a check of every character costs ten times that, so the digits are not
# checked one by one: a row edited by hand into that shape but not JSON is refused at its first
# use). A key holding GLOB's own characters (`*?[`) could match another name: such a key is no
# topic name, and the names are checked next.
LAZY_ROW_SQL: Final = (
    "length(key) BETWEEN 1 AND 127"
    ' AND value GLOB \'{"topicName":"\' || key || \'","readQueueNums":[0-9]*,'
    '"writeQueueNums":[0-9]*,"perm":[0-9]*,"topicFilterType":"*","topicSysFlag":[0-9]*,'
    '"order":[ft]*}\''
)
_JAVA_INT_MIN: Final = -(2**31)
_JAVA_INT_MAX: Final = 2**31 - 1
# Names of such rows are checked all at once (one match over them joined by newlines).
_VALID_TOPIC_LINES: Final = re.compile(r"(?:[%|a-zA-Z0-9_-]{1,127}\n)*")

# TopicValidator's static sets; the cluster, broker and reply topics are added per broker.
SYSTEM_TOPICS: Final = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)


# TopicValidator.validateTopic: None for a valid name, else RocketMQ's remark.
validate_topic_name = topic_problem


def _valid_topics(table: dict[str, TopicConfig], source: str) -> dict[str, TopicConfig]:
    return with_valid_names(
        table,
        validate_topic_name,
        "topic(s)",
        source,
        name_of=lambda config: config.topic_name,
        renamed=lambda config, name: replace(config, topic_name=name),
    )


def _reads_back(config: TopicConfig) -> bool:
    """Whether `TopicConfig.from_dict` of its `to_dict` JSON is `config` by its one-step path
    (every field of its JSON type and in range): such a config can be kept as text."""
    return (
        type(config.topic_name) is str
        and type(config.read_queue_nums) is int
        and type(config.write_queue_nums) is int
        and type(config.perm) is int
        and type(config.topic_sys_flag) is int
        and type(config.topic_filter_type) is str
        and bool(config.topic_filter_type)
        and type(config.order) is bool
        and all(
            _JAVA_INT_MIN <= value <= _JAVA_INT_MAX
            for value in (
                config.read_queue_nums,
                config.write_queue_nums,
                config.perm,
                config.topic_sys_flag,
            )
        )
    )


def _text_is(text: str, config: TopicConfig) -> bool:
    """Whether a row's text (as read, maybe written by another version) decodes to `config`."""
    try:
        return TopicConfig.from_dict(json.loads(text)) == config
    except DECODE_ERRORS:
        return False


def parse_topic_wrapper(
    text: str | bytes, *, max_size: int = DEFAULT_MAX_BODY_SIZE
) -> TopicConfigSerializeWrapper:
    """A topics.json or GET_ALL_TOPIC_CONFIG body; `BodyDecodeError` when it is not one."""
    return decode_json_object(
        text, "topic configs", TopicConfigSerializeWrapper.from_dict, max_size=max_size
    )


def is_not_allowed_send_topic(topic: str) -> bool:
    """Topics a client may not send to directly (the broker writes them itself)."""
    return topic in NOT_ALLOWED_SEND_TOPICS


class TopicChange(enum.Enum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"
    REPLACED = "replaced"  # the whole table, copied from the master by SlaveSynchronize


@dataclass(frozen=True, slots=True)
class TopicConfigChanged:
    """Reported after the table changed and was persisted. `topic` is None for REPLACED.
    `text`: the topic's row as kept (`json_row`), when the change kept it as text: a listener
    takes it from here instead of looking the topic up again in a table of a million."""

    kind: TopicChange
    topic: str | None
    data_version: DataVersion
    text: str | None = None


TopicChangeListener = Callable[[TopicConfigChanged], None]


class TopicConfigManager(ConfigManager[TopicConfigSerializeWrapper]):
    """The topics this broker serves. Not thread safe: use it from the event loop only."""

    def __init__(
        self,
        config_dir: Path,
        broker: BrokerConfig,
        *,
        schedule_queue_nums: int = DEFAULT_DELAY_LEVELS,
        on_change: TopicChangeListener | None = None,
    ) -> None:
        super().__init__(config_dir / TOPICS_FILE)
        self._broker = broker
        self._table: dict[str, TopicConfig] = {}
        # topic -> its row's JSON text, not decoded yet (module docstring); never a key of _table
        self._rows: dict[str, str] = {}
        self.data_version = DataVersion()
        self.on_change = on_change
        self._system_topics = set(SYSTEM_TOPICS)
        self._add_system_topics(schedule_queue_nums)

    # --- start-up -------------------------------------------------------------------------

    def _add_system(self, config: TopicConfig) -> None:
        self._system_topics.add(config.topic_name)
        self._table[config.topic_name] = config

    def _add_system_topics(self, schedule_queue_nums: int) -> None:
        broker = self._broker
        self._add_system(TopicConfig(SELF_TEST_TOPIC, 1, 1))
        if broker.auto_create_topic_enable:
            nums = broker.default_topic_queue_nums
            self._add_system(
                TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, nums, nums, PERM_READ_WRITE | PERM_INHERIT)
            )
        self._add_system(TopicConfig(BENCHMARK_TOPIC, 1024, 1024))
        # Java's TopicConfig default of 16 queues applies to the cluster topic.
        cluster_perm = PERM_INHERIT | (PERM_READ_WRITE if broker.cluster_topic_enable else 0)
        self._add_system(TopicConfig(broker.broker_cluster_name, perm=cluster_perm))
        broker_perm = PERM_INHERIT | (PERM_READ_WRITE if broker.broker_topic_enable else 0)
        self._add_system(TopicConfig(broker.broker_name, 1, 1, broker_perm))
        self._add_system(TopicConfig(OFFSET_MOVED_EVENT, 1, 1))
        self._add_system(TopicConfig(SCHEDULE_TOPIC, schedule_queue_nums, schedule_queue_nums))
        reply_topic = f"{broker.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}"
        self._add_system(TopicConfig(reply_topic, 1, 1))
        if broker.trace_topic_enable:  # where clients with message trace write their records
            self._add_system(TopicConfig(broker.msg_trace_topic_name, 1, 1))

    # --- persistence ----------------------------------------------------------------------

    def encode(self) -> str:
        return pretty_json(self.wrapper().to_dict())

    def parse(self, text: str) -> TopicConfigSerializeWrapper:
        return parse_topic_wrapper(text, max_size=CONFIG_FILE_MAX_SIZE)

    def adopt(self, state: TopicConfigSerializeWrapper) -> None:
        self._table.update(_valid_topics(state.topic_config_table, "topics.json"))
        self.data_version = replace(state.data_version)

    def row_keys(self) -> Iterable[str]:
        return [*self._table, *self._rows]

    def encode_row(self, key: str) -> str | None:
        config = self._table.get(key)
        if config is None:
            return self._rows.get(key)  # as read, not decoded yet
        return compact_json(config.to_dict())

    def _get(self, topic: str) -> TopicConfig | None:
        config = self._table.get(topic)
        if config is None and topic in self._rows:
            config = self._decode_row(topic)
        return config

    def _decode_row(self, topic: str) -> TopicConfig | None:
        """A row kept as text, decoded now and kept decoded. Its shape was checked at load; a
        value that is still not a topic config (edited by hand) is refused here, logged once,
        and the topic is left out of the table (its row stays in tables.db)."""
        text = self._rows.pop(topic)
        try:
            config = TopicConfig.from_dict(json.loads(text))
        except DECODE_ERRORS as exc:
            log.error(
                "topic %s: its row in %s is unreadable (%s: %s), left out of the table: %s",
                topic,
                self.store.path,
                type(exc).__name__,
                exc,
                text[:200],
            )
            return None
        self._table[topic] = config
        return config

    def _decoded(self) -> dict[str, TopicConfig]:
        """Every topic decoded, without keeping the decoded rows (a snapshot for the rare whole
        table reads: GET_ALL_TOPIC_CONFIG, the export, a slave's copy)."""
        table = dict(self._table)
        for topic, text in list(self._rows.items()):
            try:
                table[topic] = TopicConfig.from_dict(json.loads(text))
            except DECODE_ERRORS:
                self._decode_row(topic)  # logs it and leaves it out
        return table

    def json_rows(self) -> list[tuple[str, str]]:
        """(topic, its TopicConfig as compact JSON) for every topic: the rows not decoded yet as
        read (the JSON this manager writes), the others encoded now."""
        rows = [(topic, compact_json(config.to_dict())) for topic, config in self._table.items()]
        rows += self._rows.items()
        return rows

    def json_row(self, topic: str) -> str | None:
        """One topic's TopicConfig as compact JSON (None when there is none): a row not
        decoded yet as it is, without decoding it."""
        text = self._rows.get(topic)
        if text is not None:
            return text
        config = self._table.get(topic)
        return None if config is None else compact_json(config.to_dict())

    def read_rows(self) -> tuple[dict[str, str], str | None]:
        rows, version, lazy = self.store.read_split(self.table_name, LAZY_ROW_SQL)
        # One join of the keys (no string made per key: 0.29 -> 0.18 s for a million, scale5).
        if lazy and not _VALID_TOPIC_LINES.fullmatch("\n".join(lazy) + "\n"):
            # some name is invalid: those rows take the checked path (a warning, left out)
            for key in [key for key in lazy if validate_topic_name(key) is not None]:
                rows[key] = lazy.pop(key)
        # A system topic's row lays over the default made at construction: decoded now (the
        # few defaults looked up among the rows, not the rows among them).
        for key in [key for key in self._table if key in lazy]:
            rows[key] = lazy.pop(key)
        self._rows = lazy
        return rows, version

    def stored_whole(self) -> None:
        # the next start need not check the rows' shape (TableStore.read_split)
        self.store.record_if_all_satisfy(self.table_name, LAZY_ROW_SQL)

    def adopt_rows(self, rows: dict[str, str], version: str | None) -> None:
        table = {key: TopicConfig.from_dict(entry) for key, entry in decode_rows(rows, "topicName")}
        valid = _valid_topics(table, "tables.db")
        self._table.update(valid)
        for key in [key for key, config in valid.items() if config is not table[key]]:
            self.changed(key)  # renamed to its key: its row is written again
        if version is not None:
            self.data_version = DataVersion.from_dict(json.loads(version))

    def encode_version(self) -> str | None:
        return compact_json(self.data_version.to_dict())

    # --- queries --------------------------------------------------------------------------

    def select(self, topic: str) -> TopicConfig | None:
        config = self._table.get(topic)  # _get's own first step, inline: once per send
        if config is None and topic in self._rows:
            config = self._decode_row(topic)
        return config

    def __contains__(self, topic: object) -> bool:
        return topic in self._table or topic in self._rows

    def topics(self) -> list[str]:
        return [*self._table, *self._rows]

    def __len__(self) -> int:
        return len(self._table) + len(self._rows)

    def is_system_topic(self, topic: str) -> bool:
        """TopicValidator.isSystemTopic, with this broker's cluster/broker/reply topics."""
        return topic in self._system_topics or topic.startswith(SYSTEM_TOPIC_PREFIX)

    def check_user_topic(self, topic: str) -> str | None:
        """None when an admin may create or update `topic`; else the remark to answer with."""
        problem = validate_topic_name(topic)
        if problem is None and self.is_system_topic(topic):
            problem = f"The topic[{topic}] is conflict with system topic."
        return problem

    def wrapper(self) -> TopicConfigSerializeWrapper:
        """The table and a copy of its DataVersion, for registration and GET_ALL_TOPIC_CONFIG."""
        return TopicConfigSerializeWrapper(self._decoded(), replace(self.data_version))

    # --- changes --------------------------------------------------------------------------

    def create_in_send(
        self,
        topic: str,
        default_topic: str,
        remote_addr: str,
        client_default_queue_nums: int,
        topic_sys_flag: int,
    ) -> TopicConfig | None:
        """createTopicInSendMessageMethod: auto-create `topic` from the producer's default topic.

        Allowed only when `default_topic` exists with PERM_INHERIT (and, for TBW102, when
        autoCreateTopicEnable is on). The new topic gets min(client's, default topic's write
        queues) queues and the default topic's perm without INHERIT. Returns the existing
        config when the topic is already there, None when creation is refused.
        """
        existing = self._get(topic)
        if existing is not None:
            return existing
        if validate_topic_name(topic) is not None:
            log.warning("not creating topic %r for %s: invalid name", topic, remote_addr)
            return None
        template = self._inheritable(default_topic, remote_addr)
        if template is None:
            return None
        queue_nums = min(client_default_queue_nums, template.write_queue_nums)
        if queue_nums <= 0:
            log.warning(
                "not creating topic %s for %s: %d queues (client asked %d, %s has %d)",
                topic,
                remote_addr,
                queue_nums,
                client_default_queue_nums,
                default_topic,
                template.write_queue_nums,
            )
            return None
        config = TopicConfig(
            topic,
            queue_nums,
            queue_nums,
            template.perm & ~PERM_INHERIT,
            template.topic_filter_type,
            topic_sys_flag,
        )
        log.info(
            "create topic %s from %s for producer %s: %s", topic, default_topic, remote_addr, config
        )
        self._put(config, TopicChange.CREATED)
        return config

    def _inheritable(self, default_topic: str, remote_addr: str) -> TopicConfig | None:
        template = self._get(default_topic)
        if template is None:
            log.warning(
                "cannot create a topic for %s: default topic %s does not exist",
                remote_addr,
                default_topic,
            )
            return None
        perm = template.perm
        if (
            default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC
            and not self._broker.auto_create_topic_enable
        ):
            # TBW102 kept from a file written while auto-creation was on must not allow it now.
            perm &= ~PERM_INHERIT
        if not perm & PERM_INHERIT:
            log.warning(
                "cannot create a topic for %s: default topic %s has no inherit perm (%d)",
                remote_addr,
                default_topic,
                perm,
            )
            return None
        return template

    def create_in_send_back(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int
    ) -> TopicConfig:
        """createTopicInSendMessageBackMethod: the `%RETRY%`/`%DLQ%` topics of a group."""
        existing = self._get(topic)
        if existing is not None:
            return existing
        problem = validate_topic_name(topic)
        if problem is not None:  # the name gate refuses the groups this comes from
            raise ValueError(f"not creating topic {topic[:200]!r}: {problem}")
        config = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        log.info("create topic %s", config)
        self._put(config, TopicChange.CREATED)
        return config

    def update(self, config: TopicConfig) -> None:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC; callers validate the name)."""
        old = self._get(config.topic_name)
        kind = TopicChange.CREATED if old is None else TopicChange.UPDATED
        log.info("%s topic %s (was %s)", kind.value, config, old)
        self._put(replace(config), kind)

    def update_many(self, configs: Iterable[TopicConfig]) -> list[TopicConfigChanged]:
        """Create or replace several topics (UPDATE_AND_CREATE_TOPIC_LIST): one DataVersion
        step and one transaction for all; `on_change` hears of each. A config equal to the
        topic's current one changes nothing and is not reported. Callers validate names.

        A new topic costs one look-up of the rows' table (`setdefault`): at a million topics
        each look-up of a name is a few cache misses, and the checks before (is it there, is it
        the same), the persist and the registration each looked it up again; those now get its
        text from here (scale5, drift)."""
        changes: list[tuple[TopicChange, str, str | None]] = []
        table, rows = self._table, self._rows
        for config in configs:
            name = config.topic_name
            old = table.get(name)  # the decoded topics: a few, unless used
            text: str | None = None
            if old is None and _reads_back(config):
                # Kept as its row's text, decoded at first use, as at load: a million topics
                # created in lists held a million TopicConfigs, which each of CPython's full
                # collections walked (0.3 s of CPU at 300,000; scale5).
                text = compact_json(config.to_dict())
                kept = rows.setdefault(name, text)
                if kept is text:
                    kind = TopicChange.CREATED
                elif kept == text or _text_is(kept, config):
                    continue  # the same config
                else:
                    rows[name] = text
                    kind = TopicChange.UPDATED
            else:
                if old is None and name in rows:
                    old = self._decode_row(name)  # None when unreadable (logged)
                if old == config:
                    continue
                kind = TopicChange.CREATED if old is None else TopicChange.UPDATED
                table[name] = replace(config)
            self.changed_to(name, text)
            changes.append((kind, name, text))
        if not changes:
            return []
        log.info(
            "created or updated %d topics in one batch: %s%s",
            len(changes),
            ", ".join(topic for _, topic, _ in changes[:10]),
            " ..." if len(changes) > 10 else "",
        )
        self.data_version.next_version()
        self.version_changed()
        self.persist_quietly()
        # One copy of the version for the whole batch (a copy per topic was 2,000
        # `dataclasses.replace` per list); nobody changes a reported version.
        version = replace(self.data_version)
        reported = [TopicConfigChanged(kind, topic, version, text) for kind, topic, text in changes]
        if self.on_change is not None:
            for change in reported:
                self.on_change(change)
        return reported

    def delete(self, topic: str) -> bool:
        """Remove a topic's config; False when there was none."""
        old = self._get(topic)
        self._table.pop(topic, None)
        if old is None:
            log.warning("delete topic %s: no such topic", topic)
            return False
        log.info("deleted topic %s", old)
        self._changed(TopicChange.DELETED, topic)
        return True

    def replace_all(self, wrapper: TopicConfigSerializeWrapper) -> bool:
        """SlaveSynchronize: adopt the master's table when its DataVersion differs from ours.

        The DataVersion is copied, not bumped, so the next sync sees the two as equal.
        """
        if wrapper.data_version == self.data_version:
            return False
        table = _valid_topics(wrapper.topic_config_table, "the master's topic table")
        current = self._decoded()
        for topic in current.keys() - table.keys():
            self.changed(topic)
        for topic, config in table.items():
            if current.get(topic) != config:
                self.changed(topic)
        self._table = table
        self._rows = {}
        self.data_version = replace(wrapper.data_version)
        log.info(
            "topic table replaced from the master: %d topics, %s",
            len(self._table),
            self.data_version,
        )
        self._notify(TopicChange.REPLACED, None)
        return True

    def _put(self, config: TopicConfig, kind: TopicChange) -> None:
        self._rows.pop(config.topic_name, None)
        self._table[config.topic_name] = config
        self._changed(kind, config.topic_name)

    def _changed(self, kind: TopicChange, topic: str) -> None:
        self.data_version.next_version()
        self.changed(topic)
        self._notify(kind, topic)

    def _notify(self, kind: TopicChange, topic: str | None) -> None:
        self.version_changed()
        self.persist_quietly()
        if self.on_change is not None:
            self.on_change(TopicConfigChanged(kind, topic, replace(self.data_version)))
