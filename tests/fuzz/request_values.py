"""Hostile field values, drawn from a seeded `random.Random`: the value kinds of the request fuzzer.

Text (names: topics, groups, KV keys, client ids): path segments (`../x`, `..`, `a/b`, absolute
paths, only ever pointing into the run's own folder), NUL, control and non-ASCII characters,
empty, 300 and 70 000 characters, RocketMQ's reserved prefixes (%RETRY%, %DLQ%) and system
topics, and good names the run uses (so hostile requests hit live topics and groups).
Integers: boundaries of 32 and 64 bits and beyond (2**63, -2**63-1), negative, and text that is
not a number. Booleans: spellings Java reads and ones it does not. Every kind may be `ABSENT`
(the key is left out) or, through `typed`, a JSON/msgpack value of the wrong type.

Every escaping name ends in `MARK`, so a file it makes anywhere is recognisable.
"""

from __future__ import annotations

import random
from typing import Any, Final

__all__ = ["ABSENT", "MARK", "Values"]

MARK: Final = "fzx"
ABSENT: Final = object()

_INTS: Final = (
    "0",
    "1",
    "-1",
    "3",
    "16",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    str(2**63 - 1),
    str(2**63),
    str(-(2**63)),
    str(-(2**63) - 1),
    str(10**30),
    "",
    " 1",
    "1 ",
    "abc",
    "1.5",
    "1e3",
    "0x10",
    "+5",
    "٣",  # an Arabic-Indic digit: int() reads it, Java does not
    "1\x00",
    "true",
)
_BOOLS: Final = ("true", "false", "TRUE", "False", "1", "0", "yes", "", "tru\x00e", "null")
_WEIRD: Final = (
    "",
    " ",
    ".",
    "..",
    "a\x00b",
    "\x00",
    "nul\x00",
    "ctl\x01\x02\x1f\x7f",
    "line\nbreak",
    "tab\there",
    "日本語",
    "é",
    "😀",
    "\u202eright-to-left",
    "\ufeffbom",
    "%RETRY%",
    "%DLQ%",
    "%RETRY%%DLQ%x",
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "OFFSET_MOVED_EVENT",
    "DefaultCluster",
    "broker-a",
    "a|b",
    "a;b",
    "a:b",
    "a\\b",
    "*",
    "%s%n",
    "{}",
)
_WRONG_TYPES: Final[tuple[Any, ...]] = (
    0,
    -1,
    2**63 - 1,
    True,
    False,
    None,
    1.5,
    [],
    ["../" + MARK],
    {},
    {"a": 1},
)


class Values:
    """Hostile and good values; `good_names` are the run's live topics and groups."""

    def __init__(self, rng: random.Random, victims: list[str], *, names: bool = True) -> None:
        """`names`=False keeps names to RocketMQ's legal characters (`[%|a-zA-Z0-9_-]`, at
        most 127): the run then looks for the bugs that are not about names."""
        self.rng = rng
        # absolute paths of folders outside the stores that must survive the run
        self.victims = victims
        self.names = names

    def _legal(self) -> str:
        rng = self.rng
        return rng.choice(["fzx", "a-b_c", "%RETRY%fzx", "%DLQ%fzx", "TBW102", "x" * 100])

    def path(self) -> str:
        rng = self.rng
        if not self.names:
            return self._legal()
        depth = rng.randint(1, 5)
        leaf = rng.choice([MARK, f"{MARK}-{rng.randint(0, 99)}", "victim"])
        shapes = [
            "../" * depth + leaf,
            "../" * depth,
            "/" + "../" * depth + leaf,  # after a %RETRY%/%DLQ% prefix: escapes from its folder
            MARK + "/.." * (depth + 1) + "/" + leaf,
            "..",
            "../",
            "./" + MARK,
            f"{MARK}/../{MARK}",
            f"a/{MARK}",
            f"{MARK}/",
            "/" + MARK,
            f"/nonexistent-{MARK}/x",
            rng.choice(self.victims) if self.victims else "/" + MARK,
            (rng.choice(self.victims) if self.victims else MARK) + "/../" + MARK,
            "%RETRY%../" * depth + leaf,
            "%DLQ%" + "../" * depth + leaf,
            "..\\" * depth + leaf,
            "." + "/.." * depth + "/" + leaf,
        ]
        return rng.choice(shapes)

    def long_text(self) -> str:
        rng = self.rng
        n = rng.choice([127, 128, 200, 255, 256, 300, 1000, 70_000])
        prefix = rng.choice(["", "%RETRY%", "%DLQ%", "../"])
        return prefix + rng.choice(["x", "é", "a/"]) * max(n - len(prefix), 0)

    def text(self, good: list[str]) -> str:
        """A hostile name, or one of `good` (a third of the time, when given)."""
        rng = self.rng
        roll = rng.random()
        if good and roll < 0.33:
            name = rng.choice(good)
            if self.names and rng.random() < 0.3:  # a good name made hostile
                return rng.choice(
                    [f"./{name}", f"{name}/", f"{name}/.", f"../{name}", f"%RETRY%{name}",
                     f"{name}\x00", f" {name}", f"{name}/../{name}"]
                )  # fmt: skip
            return name
        if not self.names:
            return self._legal()
        if roll < 0.6:
            return self.path()
        if roll < 0.9:
            return rng.choice(_WEIRD)
        return self.long_text()

    def integer(self, good: int | None = None) -> str:
        if good is not None and self.rng.random() < 0.4:
            return str(good)
        return self.rng.choice(_INTS)

    def boolean(self) -> str:
        return self.rng.choice(_BOOLS)

    def wrong_type(self) -> Any:
        """A JSON value where a string or number belongs. Servers read a list or an object as
        its JSON text (fastjson does too): a name of brackets and quotes, so not with legal
        names."""
        if not self.names:
            return self.rng.choice([0, -1, 2**63 - 1, True, False])
        return self.rng.choice(_WRONG_TYPES)

    def json_number(self) -> Any:
        """A JSON body's number field: huge, negative, or not a number at all."""
        return self.rng.choice(
            [0, 1, -1, 16, 2**31, 2**63, -(2**63) - 1, 10**30, 1.5, "3", None, True, [], {}]
        )
