"""Renewal of push consumers' messages (RocketMQ 5 proxy's DefaultReceiptHandleManager), sans-IO.

A push consumer receives with `auto_renew` and no invisible duration: the broker chooses it
(`defaultInvisibleTimeMills`) and keeps the message invisible while the consumer's listener
runs, however long, until the consumer acknowledges it or changes its invisible duration (its
nack). `Renewals` holds, per (client id, consumer group), each such message's latest receipt
handle; every `renewSchedulePeriodMillis` the endpoint asks `due` which are within
`renewAheadTimeMillis` of becoming visible and renews each by RocketMQ's steps (`RENEW_STEPS_MS`:
1, 3, 5, 10, 30 minutes, then an hour each time), a ChangeInvisibleDuration whose new handle
replaces the old. It stops:

- at the consumer's AckMessage or ChangeInvisibleDuration of the message (`remove`); both are
  carried out with the latest handle, whichever handle the client sends;
- `renewMaxTimeMillis` after the receive (the message is left to come back at its deadline);
- after `maxRenewRetryTimes` failed renewals in a row, or at once when the broker refuses the
  handle (acknowledged or expired meanwhile);
- when the client is gone (NotifyClientTermination, or no heartbeat for the channel expiry):
  its messages are made visible again `invisibleTimeMillisWhenClear` later (`forget_client`),
  for the group's other consumers.

Held in memory: after a broker restart nothing is renewed, and the messages come back at their
deadlines (at least once), as after a proxy restart in RocketMQ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Final

from tidemq.broker.pop.receipt import InvalidReceiptHandle, ReceiptHandle

RENEW_STEPS_MS: Final = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)

RenewalKey = tuple[str, str]  # client id, consumer group


def renew_step_ms(renew_times: int) -> int:
    """How long a renewal keeps the message invisible, after `renew_times` renewals."""
    return RENEW_STEPS_MS[min(max(renew_times, 0), len(RENEW_STEPS_MS) - 1)]


@dataclasses.dataclass(slots=True)
class Renewed:
    topic: str
    handle: str  # the latest receipt handle
    next_visible_ms: int
    received_ms: int
    renew_times: int = 0
    failures: int = 0  # renewals failed in a row


class Renewals:
    def __init__(self) -> None:
        self._table: dict[RenewalKey, dict[str, Renewed]] = {}

    def __len__(self) -> int:
        return sum(len(messages) for messages in self._table.values())

    def add(self, key: RenewalKey, message_id: str, topic: str, handle: str, now_ms: int) -> None:
        """A message received with auto_renew (a later receive of the same message replaces
        it)."""
        self._table.setdefault(key, {})[message_id] = Renewed(
            topic, handle, _next_visible(handle, now_ms), now_ms
        )

    def remove(self, key: RenewalKey, message_id: str) -> Renewed | None:
        messages = self._table.get(key)
        if messages is None:
            return None
        renewed = messages.pop(message_id, None)
        if not messages:
            del self._table[key]
        return renewed

    def due(self, now_ms: int, ahead_ms: int) -> Iterator[tuple[RenewalKey, str, Renewed]]:
        """The messages within `ahead_ms` of becoming visible (a snapshot: safe to change the
        table while iterating)."""
        for key, messages in list(self._table.items()):
            for message_id, renewed in list(messages.items()):
                if renewed.next_visible_ms - now_ms <= ahead_ms:
                    yield key, message_id, renewed

    def renewed(self, renewed: Renewed, handle: str, now_ms: int) -> None:
        renewed.handle = handle
        renewed.next_visible_ms = _next_visible(handle, now_ms)
        renewed.renew_times += 1
        renewed.failures = 0

    def forget_client(self, client_id: str) -> list[tuple[str, Renewed]]:
        """(group, message) of every message the client had in renewal, removed."""
        gone: list[tuple[str, Renewed]] = []
        for key in [k for k in self._table if k[0] == client_id]:
            gone += [(key[1], renewed) for renewed in self._table.pop(key).values()]
        return gone


def _next_visible(handle: str, now_ms: int) -> int:
    try:
        return ReceiptHandle.decode(handle).next_visible_time
    except InvalidReceiptHandle:
        return now_ms  # due now: the renewal finds out the broker refuses it, and drops it
