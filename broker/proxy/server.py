"""grpcio's asyncio server for the MessagingService, on the broker's own event loop.

brokerd runs one uvloop loop; grpc.aio drives its completion queue from whichever asyncio loop
it is started on (uvloop included: the broker's etcd client, aetcd, is grpc.aio on the same
loop already), so the handlers call the store and managers directly, with no thread hop and no
lock. The handlers are registered by hand from the service's method names (no generated
`_pb2_grpc` module): each RPC's request type, response type and streaming kind are in `RPCS`.

With `guard` (aclEnable) every call is authenticated before its request is read (the 5.x
signature against the ACL accounts, broker/proxy/auth.py) and its resources authorized before
the handler runs; a Telemetry stream is authenticated once when it opens and each settings
command authorized. With `tls` the port serves TLS with the remoting port's certificate
(`server_credentials`); in permissive mode or with optional client certificates, which grpcio
cannot serve, through a front door on the port that relays to an internal one
(broker/proxy/front.py).

One place turns what a handler raises into the answer: `Rejected` becomes the response's
status, a request whose bytes do not decode BAD_REQUEST, anything unexpected
INTERNAL_SERVER_ERROR (logged with its traceback); a stream gets the status as its one answer
and stays open for the next command. gRPC's own status is OK for all of them, as RocketMQ's
proxy answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import grpc
from cryptography.hazmat.primitives import serialization
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.timestamp_pb2 import Timestamp
from grpc import aio

from tidemq.broker.acl.rules import Account
from tidemq.broker.acl.validator import peer_ip
from tidemq.broker.proxy.auth import GrpcGuard, needs_of, telemetry_needs
from tidemq.broker.proxy.channel import OUTBOX_LIMIT, Outbox
from tidemq.broker.proxy.front import INTERNAL_HOST, GrpcFront, needs_front
from tidemq.broker.proxy.protocol import service_pb2 as pb
from tidemq.broker.proxy.protocol.definition_pb2 import Code
from tidemq.broker.proxy.service import NOT_SERVED, CallContext, MessagingService
from tidemq.broker.proxy.status import Rejected
from tidemq.broker.remoting.tls import ClientAuth, TlsServerSettings
from tidemq.client.transport.tls import TlsSetupError

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "apache.rocketmq.v2.MessagingService"
# Headroom above the largest body for the rest of a request (properties, several messages).
FRAME_HEADROOM: Final = 1024 * 1024
STOP_GRACE_SECONDS: Final = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Rpc:
    request: type[Any]
    response: type[Any]
    streaming: str  # "unary", "server" (stream of responses) or "both"


RPCS: Final[dict[str, Rpc]] = {
    "QueryRoute": Rpc(pb.QueryRouteRequest, pb.QueryRouteResponse, "unary"),
    "Heartbeat": Rpc(pb.HeartbeatRequest, pb.HeartbeatResponse, "unary"),
    "SendMessage": Rpc(pb.SendMessageRequest, pb.SendMessageResponse, "unary"),
    "QueryAssignment": Rpc(pb.QueryAssignmentRequest, pb.QueryAssignmentResponse, "unary"),
    "ReceiveMessage": Rpc(pb.ReceiveMessageRequest, pb.ReceiveMessageResponse, "server"),
    "AckMessage": Rpc(pb.AckMessageRequest, pb.AckMessageResponse, "unary"),
    "ForwardMessageToDeadLetterQueue": Rpc(
        pb.ForwardMessageToDeadLetterQueueRequest,
        pb.ForwardMessageToDeadLetterQueueResponse,
        "unary",
    ),
    "PullMessage": Rpc(pb.PullMessageRequest, pb.PullMessageResponse, "server"),
    "UpdateOffset": Rpc(pb.UpdateOffsetRequest, pb.UpdateOffsetResponse, "unary"),
    "GetOffset": Rpc(pb.GetOffsetRequest, pb.GetOffsetResponse, "unary"),
    "QueryOffset": Rpc(pb.QueryOffsetRequest, pb.QueryOffsetResponse, "unary"),
    "EndTransaction": Rpc(pb.EndTransactionRequest, pb.EndTransactionResponse, "unary"),
    "Telemetry": Rpc(pb.TelemetryCommand, pb.TelemetryCommand, "both"),
    "NotifyClientTermination": Rpc(
        pb.NotifyClientTerminationRequest, pb.NotifyClientTerminationResponse, "unary"
    ),
    "ChangeInvisibleDuration": Rpc(
        pb.ChangeInvisibleDurationRequest, pb.ChangeInvisibleDurationResponse, "unary"
    ),
    "RecallMessage": Rpc(pb.RecallMessageRequest, pb.RecallMessageResponse, "unary"),
    "SyncLiteSubscription": Rpc(
        pb.SyncLiteSubscriptionRequest, pb.SyncLiteSubscriptionResponse, "unary"
    ),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Undecodable:
    """A request whose bytes are no message of its type (the handler answers BAD_REQUEST)."""

    type_name: str
    reason: str


def _decoder(message_type: type[Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except DecodeError as exc:
            return Undecodable(message_type.DESCRIPTOR.name, str(exc))

    return decode


def _serialize(message: ProtoMessage) -> bytes:
    return message.SerializeToString()


def metadata_of(context: aio.ServicerContext[Any, Any]) -> dict[str, str]:
    """The call's text metadata (binary `-bin` headers left out)."""
    return {
        key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)
    }


def call_context(context: aio.ServicerContext[Any, Any], peer: str) -> CallContext:
    headers = metadata_of(context)
    return CallContext(
        client_id=headers.get("x-mq-client-id", ""),
        peer=peer,
        language=headers.get("x-mq-language", ""),
        version=headers.get("x-mq-client-version", ""),
    )


def _peer_address(peer: str) -> str:
    """gRPC's `ipv4:127.0.0.1:5000` / `ipv6:[::1]:5000` as `host:port`."""
    scheme, _sep, address = peer.partition(":")
    return address if scheme in ("ipv4", "ipv6") else peer


def _failed(rpc: Rpc, code: Code.ValueType, message: str) -> Any:
    return rpc.response(status=Rejected(code, message).status())


Handler = Callable[[Any, CallContext], Awaitable[Any]]


class GrpcServer:
    """The MessagingService on `host:port` (0: any free port; `port` is the bound one)."""

    def __init__(
        self,
        service: MessagingService,
        host: str,
        port: int,
        *,
        guard: GrpcGuard | None = None,
        tls: TlsServerSettings | None = None,
    ) -> None:
        """`guard`: the ACL check of every call (aclEnable); `tls`: the remoting port's TLS
        settings, served on this port too when enabled (see `server_credentials`)."""
        self.service = service
        self.host = host
        self.port = port
        self.guard = guard
        self.tls = tls if tls is not None and tls.enabled else None
        self._server: aio.Server | None = None
        self._front: GrpcFront | None = None

    def _peer(self, context: aio.ServicerContext[Any, Any]) -> str:
        """The caller's `host:port`: behind the front door (broker/proxy/front.py), the
        client's; a call that reached the internal port without it is refused UNAUTHORIZED."""
        address = _peer_address(context.peer())
        if self._front is None:
            return address
        client = self._front.client_of(address)
        if client is None:
            raise Rejected(Code.UNAUTHORIZED, "connect to the gRPC port, not its internal one")
        return client

    def _call_context(self, context: aio.ServicerContext[Any, Any]) -> CallContext:
        return call_context(context, self._peer(context))

    def _authenticate(self, name: str, context: aio.ServicerContext[Any, Any]) -> Account | None:
        """The caller's ACL account (None: no ACL, or a trusted address); `Rejected`
        UNAUTHORIZED, logged with the peer and access key, when it is not who it says."""
        peer = self._peer(context)
        if self.guard is None:
            return None
        metadata = metadata_of(context)
        try:
            return self.guard.authenticate(metadata, peer_ip(peer))
        except Rejected as rejected:
            self._log_refusal(name, context, metadata, rejected)
            raise

    def _authorize(
        self,
        name: str,
        context: aio.ServicerContext[Any, Any],
        account: Account | None,
        needs: list[tuple[str, int]],
    ) -> None:
        if self.guard is None:
            return
        try:
            self.guard.authorize(account, needs)
        except Rejected as rejected:
            self._log_refusal(name, context, metadata_of(context), rejected)
            raise

    @staticmethod
    def _log_refusal(
        name: str,
        context: aio.ServicerContext[Any, Any],
        metadata: dict[str, str],
        rejected: Rejected,
    ) -> None:
        credential = metadata.get("authorization", "").partition("Credential=")[2]
        log.warning(
            "ACL refused gRPC %s from %s (accessKey %r): %s",
            name,
            _peer_address(context.peer()),
            credential.split(",", 1)[0].split("/", 1)[0][:64],
            rejected.message,
        )

    def _unary_handlers(self) -> dict[str, Handler]:
        service = self.service
        return {
            "QueryRoute": service.query_route,
            "Heartbeat": service.heartbeat,
            "SendMessage": service.send_message,
            "QueryAssignment": service.query_assignment,
            "NotifyClientTermination": service.notify_client_termination,
            "EndTransaction": service.end_transaction,
            "RecallMessage": service.recall_message,
            "AckMessage": service.ack_message,
            "ChangeInvisibleDuration": service.change_invisible_duration,
            "ForwardMessageToDeadLetterQueue": service.forward_message_to_dead_letter_queue,
        }

    def _method_handlers(self) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        unary = self._unary_handlers()
        for name, rpc in RPCS.items():
            decode = _decoder(rpc.request)
            if name == "Telemetry":
                handlers[name] = grpc.stream_stream_rpc_method_handler(
                    self._telemetry, request_deserializer=decode, response_serializer=_serialize
                )
            elif name == "ReceiveMessage":
                handlers[name] = grpc.unary_stream_rpc_method_handler(
                    self._stream(name, rpc, self.service.receive_message),
                    request_deserializer=decode,
                    response_serializer=_serialize,
                )
            elif rpc.streaming == "server":
                handlers[name] = grpc.unary_stream_rpc_method_handler(
                    self._not_served_stream(name, rpc),
                    request_deserializer=decode,
                    response_serializer=_serialize,
                )
            else:
                assert name in unary or name in NOT_SERVED, name
                handler = unary.get(name) or self._not_served(name)
                handlers[name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(name, rpc, handler),
                    request_deserializer=decode,
                    response_serializer=_serialize,
                )
        return handlers

    def _unary(
        self, name: str, rpc: Rpc, handler: Handler
    ) -> Callable[[Any, aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        async def answer(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            try:
                account = self._authenticate(name, context)
                if isinstance(request, Undecodable):
                    return _failed(rpc, Code.BAD_REQUEST, f"{request.type_name}: {request.reason}")
                self._authorize(name, context, account, needs_of(name, request))
                return await handler(request, self._call_context(context))
            except Rejected as rejected:
                return rpc.response(status=rejected.status())
            except Exception:
                log.exception("gRPC %s failed", name)
                return _failed(rpc, Code.INTERNAL_SERVER_ERROR, f"{name} failed in the broker")

        return answer

    def _stream(
        self, name: str, rpc: Rpc, handler: Callable[[Any, CallContext], AsyncIterator[Any]]
    ) -> Callable[[Any, aio.ServicerContext[Any, Any]], AsyncIterator[Any]]:
        """A server-streamed RPC: a refusal before the first answer is the stream's one
        status; the handler's answers otherwise; ReceiveMessage's stream then ends with the
        delivery timestamp (status, messages, timestamp, as RocketMQ's proxy writes it)."""

        async def answer(
            request: Any, context: aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            try:
                account = self._authenticate(name, context)
                if isinstance(request, Undecodable):
                    yield _failed(rpc, Code.BAD_REQUEST, f"{request.type_name}: {request.reason}")
                    return
                self._authorize(name, context, account, needs_of(name, request))
            except Rejected as rejected:
                yield rpc.response(status=rejected.status())
                return
            answered = False
            try:
                async for response in handler(request, self._call_context(context)):
                    answered = True
                    yield response
            except Rejected as rejected:
                if not answered:
                    yield rpc.response(status=rejected.status())
                else:
                    log.warning("gRPC %s ended early: %s", name, rejected.message)
            except Exception:
                log.exception("gRPC %s failed", name)
                # After the first answer a client reads no status (the stream's order is status,
                # messages, timestamp): it ends early, and messages popped but not sent come
                # back after their invisible time.
                if not answered:
                    yield _failed(rpc, Code.INTERNAL_SERVER_ERROR, f"{name} failed in the broker")
            if name == "ReceiveMessage":
                # The proxy ends every ReceiveMessage stream so (its onComplete): the 5.x
                # clients measure delivery latency from it, and the push consumer fails
                # every message without it.
                stamp = Timestamp()
                stamp.GetCurrentTime()
                yield pb.ReceiveMessageResponse(delivery_timestamp=stamp)

        return answer

    @staticmethod
    def _not_served(name: str) -> Handler:
        async def refuse(request: Any, call: CallContext) -> Any:
            del request, call
            raise Rejected(Code.NOT_IMPLEMENTED, f"{name} is not served by tidemq yet")

        return refuse

    def _not_served_stream(
        self, name: str, rpc: Rpc
    ) -> Callable[[Any, aio.ServicerContext[Any, Any]], AsyncIterator[Any]]:
        async def refuse(
            request: Any, context: aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            del request
            try:
                self._authenticate(name, context)
            except Rejected as rejected:
                yield rpc.response(status=rejected.status())
                return
            yield _failed(rpc, Code.NOT_IMPLEMENTED, f"{name} is not served by tidemq yet")

        return refuse

    async def _telemetry(
        self, requests: AsyncIterator[Any], context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.TelemetryCommand]:
        """Answers to the client's commands and the broker's own commands (a transaction
        check), through one outbox; the stream ends when the client ends its side.

        A client that writes commands and reads no answers is read no further once
        `OUTBOX_LIMIT` answers wait for it (gRPC's flow control then holds its writes): the
        answers it has not read cost the broker at most that many."""
        try:  # once, for the stream: the metadata is signed when it opens
            account = self._authenticate("Telemetry", context)
        except Rejected as rejected:
            # Each command gets the refusal and none is served; the stream ends when the
            # client ends its side (ending it first fails the client's writes in flight).
            async for _command in requests:
                yield pb.TelemetryCommand(status=rejected.status())
            return
        call = self._call_context(context)
        outbox: Outbox = asyncio.Queue()
        room = asyncio.Semaphore(OUTBOX_LIMIT)  # answers the client may leave unread
        channel = None
        if call.client_id:
            try:
                client = self.service.clients.touch(
                    call.client_id, call.peer, call.language, call.version
                )
            except Rejected as rejected:  # too many clients: said once, then the stream ends
                yield pb.TelemetryCommand(status=rejected.status())
                return
            channel = client.channel
            channel.attach(outbox)

        async def read() -> None:
            try:
                async for command in requests:
                    answer = self._telemetry_answer(command, call, context, account)
                    if answer is not None:
                        await room.acquire()
                        outbox.put_nowait(answer)
            finally:
                outbox.put_nowait(None)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while (command := await outbox.get()) is not None:
                yield command
                if command.HasField("status"):  # an answer (the broker's commands have none)
                    room.release()
        finally:
            if channel is not None:
                channel.detach(outbox)
            reader.cancel()

    def _telemetry_answer(
        self,
        command: Any,
        call: CallContext,
        context: aio.ServicerContext[Any, Any],
        account: Account | None,
    ) -> pb.TelemetryCommand | None:
        if isinstance(command, Undecodable):
            return pb.TelemetryCommand(
                status=Rejected(Code.BAD_REQUEST, f"{command.type_name}: {command.reason}").status()
            )
        try:
            self._authorize("Telemetry", context, account, telemetry_needs(command))
            return self.service.telemetry(command, call)
        except Rejected as rejected:
            return pb.TelemetryCommand(status=rejected.status())
        except Exception:
            log.exception("gRPC Telemetry command failed")
            return pb.TelemetryCommand(
                status=Rejected(
                    Code.INTERNAL_SERVER_ERROR, "Telemetry failed in the broker"
                ).status()
            )

    async def start(self) -> None:
        frame = max(self.service.limits.max_body_size, 4 * 1024 * 1024) + FRAME_HEADROOM
        server = aio.server(
            maximum_concurrent_rpcs=self.service.config.grpc_server_max_concurrent_rpcs,
            options=[
                ("grpc.max_receive_message_length", frame),
                ("grpc.max_send_message_length", frame),
                ("grpc.so_reuseport", 0),
            ],
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, self._method_handlers()),)
        )
        host = f"[{self.host}]" if ":" in self.host else self.host
        front = None
        if self.tls is not None and needs_front(self.tls):
            internal = server.add_insecure_port(f"{INTERNAL_HOST}:0")
            if internal == 0:
                raise OSError(f"grpcServerPort: cannot listen on {INTERNAL_HOST}")
            front = GrpcFront(self.host, self.port, internal, self.tls, "gRPC")
            try:
                await front.start()
            except OSError as exc:
                raise OSError(
                    f"grpcServerPort: cannot listen on {self.host}:{self.port}: {exc}"
                ) from None
            bound = front.port
        elif self.tls is not None:
            bound = server.add_secure_port(f"{host}:{self.port}", server_credentials(self.tls))
        else:
            bound = server.add_insecure_port(f"{host}:{self.port}")
        if bound == 0:
            raise OSError(f"grpcServerPort: cannot listen on {self.host}:{self.port}")
        try:
            await server.start()
        except BaseException:
            if front is not None:
                await front.stop()
            raise
        self._server, self._front, self.port = server, front, bound
        log.info(
            "RocketMQ 5 gRPC endpoint on %s:%d%s%s",
            self.host,
            self.port,
            f" (TLS {self.tls.mode.value}, client certificates {self.tls.client_auth.value})"
            if self.tls is not None
            else "",
            ", signatures checked against the ACL accounts" if self.guard is not None else "",
        )

    async def stop(self) -> None:
        front, self._front = self._front, None
        if front is not None:
            await front.stop()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(STOP_GRACE_SECONDS)


def server_credentials(tls: TlsServerSettings) -> grpc.ServerCredentials:
    """The remoting port's certificate and key for the gRPC port (`TlsSetupError` naming the
    key whose file does not load).

    gRPC takes the key unencrypted: one with `tls.server.keyPassword` is decrypted in memory.
    Client certificates: `require` asks for one chaining to `tls.server.trustCertPath`.
    `permissive` and `optional` are served by the front door (broker/proxy/front.py)."""
    try:
        cert = Path(tls.cert_path).read_bytes()
        key = Path(tls.key_path or tls.cert_path).read_bytes()
    except OSError as exc:
        raise TlsSetupError(f"tls.server.certPath / keyPath: cannot be read: {exc}") from None
    try:
        private = serialization.load_pem_private_key(key, tls.key_password.encode() or None)
    except (ValueError, TypeError) as exc:
        raise TlsSetupError(f"tls.server.keyPath: cannot load {tls.key_path}: {exc}") from None
    key = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    trust = None
    require = tls.client_auth is ClientAuth.require
    if require:
        try:
            trust = Path(tls.trust_cert_path).read_bytes()
        except OSError as exc:
            raise TlsSetupError(f"tls.server.trustCertPath: cannot be read: {exc}") from None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=trust, require_client_auth=require
    )
