"""Transactional messages against real processes: a name server, a broker, our producers and
consumers, and a producer process that dies between the prepare and the end.

The broker runs with short check settings (transactionCheckInterval 300 ms, transactionTimeOut
500 ms, transactionCheckMax 3). "The check has passed a message" is read from the broker: the
check's progress is the consumer offset of CID_RMQ_SYS_TRANS in RMQ_SYS_TRANS_HALF_TOPIC.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.support.conditions import eventually
from tests.support.processes import Daemon, ProcessGroup
from tidemq import (
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    TransactionProducer,
    TransactionSendResult,
)
from tidemq.client.api import BrokerAPI
from tidemq.client.config import ClientConfig
from tidemq.client.consumer.push import AsyncPushConsumer
from tidemq.client.message import ReceivedMessage
from tidemq.client.producer import AsyncProducer
from tidemq.client.protocol.headers import (
    PULL_FLAG_SUBSCRIPTION,
    EndTransactionRequestHeader,
    PullMessageRequestHeader,
    encode,
)
from tidemq.client.protocol.heartbeat import ConsumeFromWhere
from tidemq.client.remoting.codes import RequestCode, ResponseCode
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.transport.connection import RemotingConnection
from tidemq.store.record import decode_message_id

pytestmark = pytest.mark.asyncio

CHECKS = ("transactionCheckInterval=300", "transactionTimeOut=500", "transactionCheckMax=3")
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_GROUP = "CID_RMQ_SYS_TRANS"


def config(namesrv: Daemon) -> ClientConfig:
    return ClientConfig.create(
        namesrv.address, poll_name_server_interval=1.0, heartbeat_broker_interval=1.0
    )


async def check_progress(api: BrokerAPI, broker: Daemon) -> int:
    return await api.query_consumer_offset(broker.address, CHECK_GROUP, HALF, 0)


async def half_messages(api: BrokerAPI, broker: Daemon) -> int:
    """Half messages stored so far: first copies and the copies the checks made."""
    return await api.get_max_offset(broker.address, HALF, 0)


class Delivered:
    """What a push consumer of one topic received, by body."""

    def __init__(self) -> None:
        self.bodies: Counter[bytes] = Counter()

    async def __call__(self, msg: ReceivedMessage) -> None:
        self.bodies[msg.body] += 1


async def consume(namesrv: Daemon, group: str, topic: str) -> tuple[AsyncPushConsumer, Delivered]:
    delivered = Delivered()
    consumer = AsyncPushConsumer(
        group, config=config(namesrv), consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(topic, "*", delivered)
    await consumer.start()
    return consumer, delivered


async def test_commit_is_delivered_rollback_is_not_and_neither_is_checked(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", *CHECKS)
    checked: list[bytes] = []

    async def execute(msg: Message, arg: object) -> LocalTransactionState:
        assert arg == "the arg"
        return (
            LocalTransactionState.COMMIT
            if msg.body == b"commit"
            else LocalTransactionState.ROLLBACK
        )

    def check(msg: ReceivedMessage) -> LocalTransactionState:
        checked.append(msg.body)
        return LocalTransactionState.COMMIT

    async with AsyncTransactionProducer(
        "PG-tx", config=config(namesrv), execute=execute, check=check
    ) as producer:
        results: list[TransactionSendResult] = [
            await producer.send_message_in_transaction(Message("TX1", body), "the arg")
            for body in (b"commit", b"rollback")
        ]
        assert [r.local_transaction_state for r in results] == [
            LocalTransactionState.COMMIT,
            LocalTransactionState.ROLLBACK,
        ]
        consumer, delivered = await consume(namesrv, "G-tx1", "TX1")
        try:
            await eventually(lambda: delivered.bodies[b"commit"] == 1, "the committed message", 30)

            async def passed() -> bool:
                return await check_progress(api, broker) >= 2

            # The check walks past both half messages: their transactions have ended.
            await eventually(passed, "the check past both half messages", 30)
            assert checked == []
            assert await half_messages(api, broker) == 2  # no copy: nothing was checked
            assert delivered.bodies == Counter({b"commit": 1})
        finally:
            await consumer.shutdown()


class LosingEnds:
    """Between a producer and its brokers, a network that loses every END_TRANSACTION the
    producer ends its own transactions with (oneway, as RocketMQ's producer sends it: the
    producer cannot tell). Everything else, the answers to the broker's checks included (they
    go on the broker's own connection), passes."""

    def __init__(self, producer: AsyncTransactionProducer) -> None:
        self.lost = 0
        remoting = producer.instance.api.remoting
        ready, oneway = remoting.ready_connection, remoting.invoke_oneway

        def lose(request: RemotingCommand) -> bool:
            if request.code == RequestCode.END_TRANSACTION:
                self.lost += 1
                return True
            return False

        class Connection:
            def __init__(self, connection: RemotingConnection) -> None:
                self.connection = connection

            def oneway_now(self, request: RemotingCommand) -> bool:
                return lose(request) or self.connection.oneway_now(request)

            def __getattr__(self, name: str) -> object:
                return getattr(self.connection, name)

        def ready_connection(address: str) -> object:
            connection = ready(address)
            return None if connection is None else Connection(connection)

        async def invoke_oneway(
            address: str, request: RemotingCommand, timeout: float | None = None
        ) -> None:
            if not lose(request):
                await oneway(address, request, timeout)

        remoting.ready_connection = ready_connection  # type: ignore[method-assign]
        remoting.invoke_oneway = invoke_oneway  # type: ignore[method-assign]


async def test_a_lost_end_is_resolved_by_the_check(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    # END_TRANSACTION goes oneway (RocketMQ's DefaultMQProducerImpl.endTransaction): a lost one
    # is not seen by the producer, and the broker's check resolves the transaction instead.
    broker = processes.brokerd(namesrv.address, tmp_path / "b", *CHECKS, "transactionCheckMax=200")
    checked: list[ReceivedMessage] = []

    def execute(msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check(msg: ReceivedMessage) -> LocalTransactionState:
        checked.append(msg)
        return LocalTransactionState.COMMIT

    async with AsyncTransactionProducer(
        "PG-lost", config=config(namesrv), execute=execute, check=check
    ) as producer:
        network = LosingEnds(producer)
        result = await producer.send_message_in_transaction(Message("TX7", b"lost", keys="K7"))
        # The producer ended it, as far as it can tell: no error, no wait for the broker.
        assert result.local_transaction_state is LocalTransactionState.COMMIT
        assert network.lost == 1
        consumer, delivered = await consume(namesrv, "G-tx7", "TX7")
        try:
            await eventually(lambda: delivered.bodies[b"lost"] == 1, "the checked commit", 60)
            assert checked  # the commit came from the check's answer, not from the lost END
            assert {(m.topic, m.keys, m.body) for m in checked} == {("TX7", "K7", b"lost")}
            assert {m.msg_id for m in checked} == {result.msg_id}
            copies = await half_messages(api, broker)

            async def passed() -> bool:
                return await check_progress(api, broker) >= copies

            await eventually(passed, "the check past the resolved transaction", 30)
            asked = len(checked)
            copies = await half_messages(api, broker)
            await eventually(passed, "the check past every copy made since", 30)
            assert len(checked) == asked  # resolved: asked no more
            assert delivered.bodies == Counter({b"lost": 1})
            assert network.lost == 1  # the check's answers were not lost
        finally:
            await consumer.shutdown()


CRASHING_PRODUCER = textwrap.dedent(
    """
    import asyncio, os, sys
    from tidemq import AsyncTransactionProducer, LocalTransactionState, Message
    from tidemq.client.config import ClientConfig

    def execute(msg, arg):
        print("prepared", flush=True)
        os._exit(3)  # dies between the prepare and the end

    async def main():
        producer = AsyncTransactionProducer(
            "PG-crash", config=ClientConfig.create(sys.argv[1]), execute=execute,
            check=lambda msg: LocalTransactionState.UNKNOWN,
        )
        await producer.start()
        await producer.send_message_in_transaction(Message("TX2", b"crash-body", keys="K2"))

    asyncio.run(main())
    """
)


async def test_a_producer_that_died_is_checked_through_a_restarted_one(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    # Checks enough for the producer's restart to come in time.
    broker = processes.brokerd(namesrv.address, tmp_path / "b", *CHECKS, "transactionCheckMax=200")
    crashed = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CRASHING_PRODUCER,
        namesrv.address,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(crashed.communicate(), 120)
    finally:
        if crashed.returncode is None:
            crashed.kill()
            await crashed.wait()
    assert crashed.returncode == 3, err.decode()
    assert b"prepared" in out
    checked: list[ReceivedMessage] = []

    def check(msg: ReceivedMessage) -> LocalTransactionState:
        checked.append(msg)
        return LocalTransactionState.COMMIT

    def never(msg: Message, arg: object) -> LocalTransactionState:
        raise AssertionError("no local transaction runs here")

    async with AsyncTransactionProducer(
        "PG-crash", config=config(namesrv), execute=never, check=check
    ):
        consumer, delivered = await consume(namesrv, "G-tx2", "TX2")
        try:
            await eventually(lambda: delivered.bodies[b"crash-body"] == 1, "the checked commit", 60)
            # The checks asked about the message as the producer sent it. A round can ask again
            # before the END answering the last one has reached the broker (a loaded machine
            # and 300 ms rounds): checks are at least once, the commit exactly once.
            assert checked
            assert {(m.topic, m.keys, m.body) for m in checked} == {("TX2", "K2", b"crash-body")}

            copies = await half_messages(api, broker)  # the first, and the checks' copies

            async def passed() -> bool:
                return await check_progress(api, broker) >= copies

            await eventually(passed, "the check past the ended transaction", 30)
            asked = len(checked)
            copies = await half_messages(api, broker)
            await eventually(passed, "the check past every copy made since", 30)
            assert len(checked) == asked  # no check after the end
            assert delivered.bodies == Counter({b"crash-body": 1})
        finally:
            await consumer.shutdown()


async def test_a_transaction_never_resolved_goes_to_the_check_max_topic(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", *CHECKS)
    checks: list[int] = []

    def check(msg: ReceivedMessage) -> LocalTransactionState:
        checks.append(int(msg.properties.get("TRANSACTION_CHECK_TIMES", "0")))
        return LocalTransactionState.UNKNOWN

    def execute(msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    async with AsyncTransactionProducer(
        "PG-open", config=config(namesrv), execute=execute, check=check
    ) as producer:
        result = await producer.send_message_in_transaction(Message("TX3", b"open"))
        assert result.local_transaction_state is LocalTransactionState.UNKNOWN

        async def discarded() -> bool:
            return await api.get_max_offset(broker.address, "TRANS_CHECK_MAX_TIME_TOPIC", 0) >= 1

        await eventually(discarded, "the message in TRANS_CHECK_MAX_TIME_TOPIC", 60)
        assert checks == [1, 2, 3]  # transactionCheckMax checks, numbered
        pulled = await api.pull(
            broker.address,
            PullMessageRequestHeader(
                "G-max",
                "TRANS_CHECK_MAX_TIME_TOPIC",
                queue_id=0,
                queue_offset=0,
                max_msg_nums=32,
                sys_flag=PULL_FLAG_SUBSCRIPTION,
                commit_offset=0,
                suspend_timeout_millis=0,
                sub_version=0,
                subscription="*",
            ),
        )
        assert [m.body for m in pulled.messages] == [b"open"]
        assert pulled.messages[0].properties["REAL_TOPIC"] == "TX3"
        progress = await half_messages(api, broker)

        async def passed() -> bool:
            return await check_progress(api, broker) >= progress

        await eventually(passed, "the check past the discarded transaction", 30)
        assert checks == [1, 2, 3]  # no check after the move
        assert await api.get_max_offset(broker.address, "TRANS_CHECK_MAX_TIME_TOPIC", 0) == 1


async def test_bad_end_transactions_get_clear_answers_and_nothing_twice(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    broker = processes.brokerd(namesrv.address, tmp_path / "b", *CHECKS)

    async def end(
        offset_msg_id: str, queue_offset: int, state: int, group: str = "PG-bad"
    ) -> tuple[int, str | None]:
        header = EndTransactionRequestHeader(
            group, queue_offset, decode_message_id(offset_msg_id)[1], state, "id"
        )
        response = await api.invoke(
            broker.address, api.request(RequestCode.END_TRANSACTION, encode(header))
        )
        return response.code, response.remark

    def unknown(msg: object, arg: object = None) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    async with (
        AsyncTransactionProducer(
            "PG-bad", config=config(namesrv), execute=unknown, check=unknown
        ) as producer,
        AsyncProducer("P-plain", config=config(namesrv)) as plain,
    ):
        half = (await producer.send_message_in_transaction(Message("TX4", b"once"))).send_result
        normal = await plain.send(Message("TX4", b"plain"))

        # Not a half message: a plain message's offsets, and an offset no record starts at.
        code, remark = await end(normal.offset_msg_id, normal.queue_offset, 8)
        assert code == ResponseCode.SYSTEM_ERROR and "no half message" in (remark or "")
        code, remark = await end(half.offset_msg_id, half.queue_offset + 7, 8)
        assert code == ResponseCode.SYSTEM_ERROR and "table offset wrong" in (remark or "")
        code, remark = await end(half.offset_msg_id, half.queue_offset, 8, group="PG-other")
        assert code == ResponseCode.SYSTEM_ERROR and "producer group wrong" in (remark or "")
        code, remark = await end(half.offset_msg_id, half.queue_offset, 5)
        assert code == ResponseCode.ILLEGAL_OPERATION and "commitOrRollback 5" in (remark or "")
        # Commit once; the second commit and a rollback after it are refused.
        assert (await end(half.offset_msg_id, half.queue_offset, 8))[0] == ResponseCode.SUCCESS
        for state in (8, 12):
            code, remark = await end(half.offset_msg_id, half.queue_offset, state)
            assert code == ResponseCode.TRANSACTION_FAILED and "already ended" in (remark or "")

        consumer, delivered = await consume(namesrv, "G-tx4", "TX4")
        try:
            await eventually(
                lambda: delivered.bodies[b"once"] == 1 and delivered.bodies[b"plain"] == 1,
                "the committed and the plain message",
                30,
            )

            async def passed() -> bool:
                return await check_progress(api, broker) >= 1

            await eventually(passed, "the check past the committed message", 30)
            assert delivered.bodies == Counter({b"once": 1, b"plain": 1})
        finally:
            await consumer.shutdown()


async def test_the_blocking_producer_runs_its_callbacks_in_threads(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path
) -> None:
    processes.brokerd(namesrv.address, tmp_path / "b", *CHECKS)
    threads: list[str] = []

    def execute(msg: Message, arg: object) -> LocalTransactionState:
        threads.append(threading.current_thread().name)
        return LocalTransactionState.UNKNOWN  # left to the check

    def check(msg: ReceivedMessage) -> LocalTransactionState:
        threads.append(threading.current_thread().name)
        return LocalTransactionState.COMMIT

    producer = TransactionProducer(
        "PG-blocking", config=config(namesrv), execute=execute, check=check
    )
    await asyncio.to_thread(producer.start)
    try:
        result = await asyncio.to_thread(
            producer.send_message_in_transaction, Message("TX5", b"later")
        )
        assert result.local_transaction_state is LocalTransactionState.UNKNOWN
        consumer, delivered = await consume(namesrv, "G-tx5", "TX5")
        try:
            await eventually(lambda: delivered.bodies[b"later"] == 1, "the checked commit", 30)
        finally:
            await consumer.shutdown()
    finally:
        await asyncio.to_thread(producer.shutdown)
    assert len(threads) == 2 and "tidemq-client-loop" not in threads


async def test_open_and_ended_transactions_survive_a_broker_crash(
    processes: ProcessGroup, namesrv: Daemon, tmp_path: Path, api: BrokerAPI
) -> None:
    # No check before the crash (transactionTimeOut of 10 minutes); checks at once after it.
    broker = processes.brokerd(
        namesrv.address, tmp_path / "b", *CHECKS, "transactionTimeOut=600000"
    )
    checked: list[bytes] = []

    def execute(msg: Message, arg: object) -> LocalTransactionState:
        return (
            LocalTransactionState.COMMIT if msg.body == b"done" else LocalTransactionState.UNKNOWN
        )

    def check(msg: ReceivedMessage) -> LocalTransactionState:
        checked.append(msg.body)
        return LocalTransactionState.COMMIT

    async with AsyncTransactionProducer(
        "PG-crash-broker", config=config(namesrv), execute=execute, check=check
    ) as producer:
        done = (await producer.send_message_in_transaction(Message("TX6", b"done"))).send_result
        await producer.send_message_in_transaction(Message("TX6", b"open"))

        # END_TRANSACTION goes oneway: the crash comes once the broker has recorded "done"'s
        # end (its op message), which the restarted broker must then know. Asked through the
        # producer's connection: `api` then meets the restarted broker on a new one.
        async def ended() -> bool:
            return await producer.instance.api.get_max_offset(broker.address, OP_TOPIC, 0) >= 1

        await eventually(ended, "the op message of the committed transaction", 30)
        broker.kill()
        broker = processes.brokerd(namesrv.address, tmp_path / "b", *CHECKS, port=broker.port)

        # The op queue says "done" has ended: a second commit is refused after the restart.
        header = EndTransactionRequestHeader(
            "PG-crash-broker", done.queue_offset, decode_message_id(done.offset_msg_id)[1], 8, "x"
        )
        response = await api.invoke(
            broker.address, api.request(RequestCode.END_TRANSACTION, encode(header))
        )
        assert response.code == ResponseCode.TRANSACTION_FAILED, response.remark
        # "open" is still open: the check asks the producer, and its commit is applied.
        consumer, delivered = await consume(namesrv, "G-tx6", "TX6")
        try:
            await eventually(lambda: delivered.bodies[b"open"] == 1, "the checked commit", 60)
            copies = await half_messages(api, broker)

            async def passed() -> bool:
                return await check_progress(api, broker) >= copies

            await eventually(passed, "the check past every half message", 30)
            assert checked == [b"open"]
            assert delivered.bodies == Counter({b"done": 1, b"open": 1})
        finally:
            await consumer.shutdown()
