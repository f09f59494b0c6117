"""common/frozen.py: `maker(cls)` builds the same frozen slots dataclass instance as `cls(...)`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from tidemq.client.message import SendResult, SendStatus
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.common.frozen import maker


def test_made_objects_equal_and_hash_as_constructed_ones() -> None:
    queue = maker(MessageQueue)("T", "broker-a", 3)
    assert queue == MessageQueue("T", "broker-a", 3)
    assert hash(queue) == hash(MessageQueue("T", "broker-a", 3))
    assert type(queue) is MessageQueue
    result = maker(SendResult)(SendStatus.SEND_OK, "id", "offset-id", queue, 7)
    assert result == SendResult(SendStatus.SEND_OK, "id", "offset-id", queue, 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.queue_offset = 8  # type: ignore[misc]


def test_every_field_is_required_and_positional() -> None:
    make = maker(MessageQueue)
    with pytest.raises(TypeError):
        make("T", "broker-a")


@dataclass(frozen=True)
class _NoSlots:
    a: int


@dataclass(frozen=True, slots=True)
class _PostInit:
    a: int

    def __post_init__(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class _NotInInit:
    a: int
    b: int = field(default=0, init=False)


@pytest.mark.parametrize("cls", [_NoSlots, _PostInit, _NotInInit, int])
def test_classes_the_maker_would_build_wrong_are_refused(cls: type) -> None:
    with pytest.raises(TypeError):
        maker(cls)
