"""A 5.x client as a channel of the broker's client managers, and its Telemetry stream's outbox.

The broker's managers know clients by a hashable `Channel` with a `peer` (a remoting connection
for 4.x clients). A 5.x client's channel is its client id; what the broker has to tell it (a
transaction check) goes into the outbox of its open Telemetry stream, which the server writes
to the client (broker/proxy/server.py). With no stream open, nothing can be told: the call
says so and the caller logs it.
"""

from __future__ import annotations

import asyncio
from typing import Final

from tidemq.broker.proxy.messages import from_store
from tidemq.broker.proxy.protocol.service_pb2 import (
    RecoverOrphanedTransactionCommand,
    TelemetryCommand,
)
from tidemq.store.record import StoredMessage

# A stream's outbox: None is the end mark its reader puts when the client ends its side.
Outbox = asyncio.Queue[TelemetryCommand | None]
OUTBOX_LIMIT: Final = 1024  # commands waiting for a slow client; more are dropped (logged)


class GrpcChannel:
    __slots__ = ("_outbox", "client_id", "peer")

    def __init__(self, client_id: str, peer: str) -> None:
        self.client_id = client_id
        self.peer = peer
        self._outbox: Outbox | None = None

    def __hash__(self) -> int:
        return hash(("grpc", self.client_id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GrpcChannel) and other.client_id == self.client_id

    def __repr__(self) -> str:
        return f"<GrpcChannel {self.client_id} {self.peer}>"

    def attach(self, outbox: Outbox) -> None:
        """The client's Telemetry stream is open (a newer stream replaces an older one)."""
        self._outbox = outbox

    def detach(self, outbox: Outbox) -> None:
        if self._outbox is outbox:
            self._outbox = None

    @property
    def streaming(self) -> bool:
        return self._outbox is not None

    def tell(self, command: TelemetryCommand) -> bool:
        """Queue `command` for the client's stream; False when it has none or is too far behind."""
        outbox = self._outbox
        if outbox is None or outbox.qsize() >= OUTBOX_LIMIT:
            return False
        outbox.put_nowait(command)
        return True

    def check_transaction(self, half: StoredMessage, transaction_id: str) -> bool:
        """Ask the producer to resolve the half message (RecoverOrphanedTransactionCommand); it
        answers with EndTransaction, source SERVER_CHECK."""
        command = RecoverOrphanedTransactionCommand(
            message=from_store(half), transaction_id=transaction_id
        )
        return self.tell(TelemetryCommand(recover_orphaned_transaction_command=command))
