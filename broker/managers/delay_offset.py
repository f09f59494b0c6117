"""How far the schedule service has delivered each delay level: table `delayOffset` of
`config/tables.db` (a row per level), imported from and exported to `config/delayOffset.json`.

File format (RocketMQ's DelayOffsetSerializeWrapper), delay level -> next offset to deliver in
that level's queue of SCHEDULE_TOPIC_XXXX (queue id = level - 1)::

    {"offsetTable": {"1": 100, "2": 7, "3": 0}}

Java writes the levels as bare numbers (`{1:100,2:7}`); both forms are read. The text is also
the body of GET_ALL_DELAY_OFFSET (45), which a slave writes to its own file. Unknown fields
(5.x adds a `dataVersion`) are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tidemq.broker.managers.config_file import (
    CONFIG_FILE_MAX_SIZE,
    DELAY_OFFSET_FILE,
    ConfigManager,
    decode_json_object,
    pretty_json,
)
from tidemq.client.remoting.json_body import DEFAULT_MAX_BODY_SIZE, dumps

__all__ = ["DelayOffsetTable", "parse_delay_offsets"]


def parse_delay_offsets(
    text: str | bytes, *, max_size: int = DEFAULT_MAX_BODY_SIZE
) -> dict[int, int]:
    """The level -> offset table of a delayOffset.json or GET_ALL_DELAY_OFFSET body.

    Raises `BodyDecodeError` when the content is not such a table.
    """
    return decode_json_object(text, "delay offsets", _delay_table, max_size=max_size)


def _delay_table(obj: dict[str, Any]) -> dict[int, int]:
    raw = obj.get("offsetTable") or {}
    return {int(level): int(offset) for level, offset in raw.items()}


class DelayOffsetTable(ConfigManager[dict[int, int]]):
    """Delay level -> offset. Not thread safe: use it from the event loop only."""

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir / DELAY_OFFSET_FILE)
        self._table: dict[int, int] = {}

    def to_dict(self) -> dict[str, Any]:
        return {"offsetTable": dict(sorted(self._table.items()))}

    def encode(self) -> str:
        return pretty_json(self.to_dict())

    def encode_body(self) -> bytes:
        """The GET_ALL_DELAY_OFFSET response body (compact JSON)."""
        return dumps(self.to_dict())

    def parse(self, text: str) -> dict[int, int]:
        return parse_delay_offsets(text, max_size=CONFIG_FILE_MAX_SIZE)

    def adopt(self, state: dict[int, int]) -> None:
        self._table = dict(state)

    def row_keys(self) -> Iterable[str]:
        return [str(level) for level in self._table]

    def encode_row(self, key: str) -> str | None:
        offset = self._table.get(int(key))
        return None if offset is None else str(offset)

    def adopt_rows(self, rows: dict[str, str], version: str | None) -> None:
        self._table = {int(level): int(offset) for level, offset in rows.items()}

    def get(self, level: int, default: int = 0) -> int:
        """The level's next offset; a level never delivered starts at 0, as in RocketMQ."""
        return self._table.get(level, default)

    def update(self, level: int, offset: int) -> None:
        self._table[level] = offset
        self.changed(str(level))

    def snapshot(self) -> dict[int, int]:
        return dict(self._table)

    def replace(self, table: dict[int, int]) -> None:
        """SlaveSynchronize: take the master's table as is and persist it.

        The master's schedule service is the only writer of delay offsets and a slave does not
        deliver delayed messages, so the master's values are authoritative here.
        """
        for key in self.row_keys():  # levels the master no longer lists are deleted
            self.changed(key)
        self._table = dict(table)
        self.changed_all()
        self.persist_quietly()
