"""Subscription expressions: `*` (everything) or `TagA || TagB` (RocketMQ's TAG filter).

A message matches when its tagsCode (Java String.hashCode of its tags) is one of the
expression's codes; the broker checks codes only, as RocketMQ does, and clients re-check the tag
strings because different tags can share a hash code.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from tidemq.common import speedups
from tidemq.store.javahash import java_string_hash

SUB_ALL = "*"


@dataclass(frozen=True, slots=True)
class TagFilter:
    expression: str
    tags: frozenset[str]
    codes: frozenset[int]

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def match_code(self, tags_code: int) -> bool:
        return not self.tags or tags_code in self.codes

    def match_tags(self, tags: str | None) -> bool:
        return not self.tags or (tags is not None and tags in self.tags)


def parse_tag_expression(expression: str | None) -> TagFilter:
    text = (expression or "").strip()
    if not text or text == SUB_ALL:
        return TagFilter(SUB_ALL, frozenset(), frozenset())
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if SUB_ALL in tags:
        return TagFilter(SUB_ALL, frozenset(), frozenset())
    return TagFilter(text, tags, frozenset(java_string_hash(t) for t in tags))


MATCH_ALL = parse_tag_expression(SUB_ALL)


def tags_code_for(tags: bytes | None) -> int:
    """The tagsCode of a message's TAGS property value as stored; 0 when it has none."""
    return _tags_hash(tags) if tags else 0


@lru_cache(maxsize=4096)
def _tags_hash(tags: bytes) -> int:
    # A topic has a handful of tags, so nearly every message hits the cache.
    return java_string_hash(tags.decode("utf-8", "replace"))


tags_code_for = speedups.select(tags_code_for, "tidemq.store._hashing")
