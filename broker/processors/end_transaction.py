"""END_TRANSACTION (37): a producer commits or rolls back a half message.

The header (EndTransactionRequestHeader) names the half message by its CommitLog offset and its
queue offset in the half queue; commitOrRollback is 8 (commit), 12 (rollback) or 0 (unknown:
nothing happens, the check will ask). A slave refuses (SLAVE_NOT_AVAILABLE). What is checked and
stored is the transaction service's (broker/transaction/service.py): an offset that is not a
half message, a wrong group or offset, a transaction that has already ended, or an unknown state
each get a code and a remark saying which, and nothing is stored twice. A request sent oneway
(as RocketMQ's clients send it) gets no answer; the outcome is logged when it is a refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any, ClassVar, Final

from tidemq.broker.remoting.server import RequestRejected, answers_at_once
from tidemq.broker.transaction.service import EndOutcome, TransactionalMessageService
from tidemq.client.protocol.headers import (
    EndTransactionRequestHeader,
    HeaderFieldError,
    header_schema,
)
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.message_store import MessageStore

log = logging.getLogger(__name__)

# Kept, not looked up per request (decoding.request_header's decode, one call deep).
_DECODE_END: Final = header_schema(EndTransactionRequestHeader).decode
# A module constant: an Enum class attribute goes through EnumType.__getattr__ on Python 3.11.
_SUCCESS: Final = ResponseCode.SUCCESS


class EndTransactionProcessor:
    # The request codes this processor serves, and the method for each (broker/processors).
    SERVES: ClassVar[Mapping[int, str]] = {
        RequestCode.END_TRANSACTION: "process_now",
    }

    def __init__(self, store: MessageStore, transactions: TransactionalMessageService) -> None:
        self.store = store
        self.transactions = transactions

    async def process(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | None:
        answer = self.process_now(connection, request)
        if answer is None or isinstance(answer, RemotingCommand):
            return answer
        return await answer

    @answers_at_once
    def process_now(
        self, connection: RemotingConnection, request: RemotingCommand
    ) -> RemotingCommand | Coroutine[Any, Any, RemotingCommand | None] | None:
        """`process` without a coroutine when the END has nothing to wait for (most ENDs):
        the answer, or an awaitable of it (the server's `dispatch_now`)."""
        if self.store.is_slave:
            raise RequestRejected(
                ResponseCode.SLAVE_NOT_AVAILABLE, "a slave does not end transactions"
            )
        try:
            header = _DECODE_END(request.ext_fields)
        except HeaderFieldError as exc:
            raise RequestRejected(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        outcome = self.transactions.end_now(header)
        if not isinstance(outcome, EndOutcome):
            return self._answer_later(connection, request, header, outcome)
        return self._answer(connection, request, header, outcome)

    async def _answer_later(
        self,
        connection: RemotingConnection,
        request: RemotingCommand,
        header: EndTransactionRequestHeader,
        outcome: Awaitable[EndOutcome],
    ) -> RemotingCommand | None:
        return self._answer(connection, request, header, await outcome)

    def _answer(
        self,
        connection: RemotingConnection,
        request: RemotingCommand,
        header: EndTransactionRequestHeader,
        outcome: EndOutcome,
    ) -> RemotingCommand | None:
        if outcome.code != _SUCCESS:
            log.info(
                "END_TRANSACTION from %s (group %s, half message %d%s): %s",
                connection.peer,
                header.producer_group,
                header.tran_state_table_offset,
                ", answering a check" if header.from_transaction_check else "",
                outcome.remark,
            )
        if request.flag & 2:  # is_oneway, inline
            return None  # nobody reads it (a refusal is logged above)
        return RemotingCommand.response_to(request, outcome.code, outcome.remark)
