"""The dashboard's web server (aiohttp): the JSON API under /api and the static front end.

Routes (all answers JSON; failures are `{"error": "one line"}` with a 4xx/5xx status):

    GET    /api/overview                      name servers, whether writes are allowed
    GET    /api/cluster                       brokers, roles, versions, TPS, disk, HA lag
    GET    /api/topics                        topic names and kinds, cluster names
    POST   /api/topics                        {topic, cluster?, readQueueNums, writeQueueNums, perm}
    GET    /api/topics/{topic}                route, queues with min/max offsets, groups
    DELETE /api/topics/{topic}
    POST   /api/topics/{topic}/send           {body, tags?, keys?}
    GET    /api/groups                        groups with members online and total lag
    GET    /api/groups/{group}                members, subscriptions, lag per queue
    POST   /api/groups/{group}/reset          {topic, timestamp (ms)}
    POST   /api/groups/{group}/skip           {topic}
    GET    /api/messages?topic&begin&end&page&pageSize
    GET    /api/messages/by-key?topic&key
    GET    /api/messages/by-id?id&topic?
    GET    /api/messages/trace?id                a message's trace records (client msgId)
    POST   /api/messages/resend               {msgId}: a dead letter back to its topic
    GET    /api/charts                        the sampler's series (sampler.py)

    GET    /api/producers?topic&group         producer connections of a group on a topic's masters
    GET    /api/rocketmq5                     5.x clients (gRPC), POP progress, timers per topic
    GET    /api/brokers/config                every broker's configuration
    POST   /api/brokers/config                {address, key, value}: UPDATE_BROKER_CONFIG
    GET    /api/acl                           whether each broker checks ACL (aclEnable, aclFile)

Writes (POST, DELETE) are refused with 403 unless the dashboard may write (WriteMode): with an
admin account (--ak/--sk) and without --read-only, as that account (what the brokers' ACL
checks); without an account, only when it listens on loopback and no broker checks ACL (asked of
every broker until one is registered, then kept). /api/overview says which, and why, and the
front end shows no create, update, send, reset, resend or delete control when it may not. A POST
must carry a JSON body (Content-Type application/json, else 415), so that no other site's page
can make one from the operator's browser without a CORS preflight (never granted). The HTTP side
has no login: bind it to an address only operators reach.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from tidemq.client.admin.api import AdminClient
from tidemq.client.dashboard import views
from tidemq.client.dashboard.sampler import Sampler
from tidemq.client.errors import (
    BrokerResponseError,
    ClientError,
    TideMQError,
    TopicNotExistError,
)
from tidemq.client.protocol.models import TopicConfig

log = logging.getLogger(__name__)

READ_ONLY: Final = "read-only dashboard"


@dataclass(slots=True)
class WriteMode:
    """Whether the dashboard may change the cluster, and the reason it gives.

    `writable` None: no account, on loopback, not --read-only: decided by the brokers' ACL
    (views.writable_without_account), asked until a broker is registered."""

    writable: bool | None
    why: str

    async def decide(self, admin: AdminClient) -> tuple[bool, str]:
        if self.writable is not None:
            return self.writable, self.why
        writable, why = views.writable_without_account(await views.acl_view(admin))
        if writable is None:
            return False, why
        self.writable, self.why = writable, why
        return writable, why


ADMIN_KEY: Final = web.AppKey("admin", AdminClient)
SAMPLER_KEY: Final = web.AppKey("sampler", Sampler)
WRITABLE_KEY: Final = web.AppKey("writable", WriteMode)
NAMESRV_KEY: Final = web.AppKey("namesrv", str)
LOOPBACK_KEY: Final = web.AppKey("loopback", bool)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def static_dir() -> Path:
    return Path(str(resources.files("tidemq.client.dashboard") / "static"))


class BadRequest(ClientError, ValueError):
    """A request the operator can fix: named parameter missing or malformed."""


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _error(status: int, reason: str) -> web.Response:
    return _json({"error": reason.splitlines()[0] if reason else "failed"}, status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Admin failures as one line of JSON, never a traceback page."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except (ClientError, ValueError) as exc:  # ours or the admin API's: the request is wrong
        return _error(400, str(exc))
    except TopicNotExistError as exc:
        return _error(404, exc.remark or str(exc))
    except BrokerResponseError as exc:
        return _error(502, f"{exc.remark or 'error'} (code {exc.code})")
    except (TideMQError, OSError, TimeoutError) as exc:
        return _error(502, str(exc) or type(exc).__name__)


LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


@web.middleware
async def _loopback_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bound to a loopback address, answer only requests made to a loopback name: a page of
    another site whose name was pointed at 127.0.0.1 (DNS rebinding) would otherwise read the
    cluster's messages and, with an admin account, change it."""
    if request.app[LOOPBACK_KEY] and _host_name(request.host) not in LOOPBACK_HOSTS:
        return _error(403, f"this dashboard answers requests to localhost only, not {request.host}")
    return await handler(request)


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@web.middleware
async def _write_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method in ("POST", "PUT", "DELETE"):
        writable, why = await request.app[WRITABLE_KEY].decide(request.app[ADMIN_KEY])
        if not writable:
            return _error(403, f"{READ_ONLY}: {why}")
        # Another site's page in the operator's browser can POST a form or text/plain to
        # this port without asking; a JSON body needs a CORS preflight, which we never grant.
        if request.method != "DELETE" and request.content_type != "application/json":
            return _error(415, "changes take a JSON body (Content-Type: application/json)")
    return await handler(request)


def _param(request: web.Request, name: str, default: str | None = None) -> str:
    value = request.query.get(name, default)
    if value is None or value == "":
        if default is not None:
            return default
        raise BadRequest(f"parameter {name} is required")
    return value


def _int(value: object, name: str) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {value!r}") from None


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except json.JSONDecodeError:
        raise BadRequest("the request body must be a JSON object") from None
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    return data


def _field(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if value is None or str(value).strip() == "":
        raise BadRequest(f"{name} is required")
    return str(value).strip()


# --- handlers -------------------------------------------------------------------------------


async def overview(request: web.Request) -> web.Response:
    writable, why = await request.app[WRITABLE_KEY].decide(request.app[ADMIN_KEY])
    return _json({"namesrv": request.app[NAMESRV_KEY], "writable": writable, "why": why})


async def producers(request: web.Request) -> web.Response:
    return _json(
        await views.producers_view(
            request.app[ADMIN_KEY], _param(request, "topic"), _param(request, "group")
        )
    )


async def rocketmq5(request: web.Request) -> web.Response:
    return _json(await views.rocketmq5_view(request.app[ADMIN_KEY]))


async def broker_configs(request: web.Request) -> web.Response:
    return _json(await views.broker_configs_view(request.app[ADMIN_KEY]))


async def update_broker_config(request: web.Request) -> web.Response:
    data = await _body(request)
    value = data.get("value")
    if value is None:
        raise BadRequest("value is required")
    return _json(
        await views.update_broker_config(
            request.app[ADMIN_KEY], _field(data, "address"), _field(data, "key"), str(value)
        )
    )


async def acl(request: web.Request) -> web.Response:
    return _json(await views.acl_view(request.app[ADMIN_KEY]))


async def cluster(request: web.Request) -> web.Response:
    return _json(await views.cluster_view(request.app[ADMIN_KEY]))


async def topics(request: web.Request) -> web.Response:
    return _json(await views.topics_view(request.app[ADMIN_KEY]))


async def topic(request: web.Request) -> web.Response:
    return _json(await views.topic_view(request.app[ADMIN_KEY], request.match_info["topic"]))


PERMS: Final = {"R": 4, "W": 2, "RW": 6, "4": 4, "2": 2, "6": 6}


async def save_topic(request: web.Request) -> web.Response:
    data = await _body(request)
    name = _field(data, "topic")
    perm = PERMS.get(str(data.get("perm", "RW")).upper())
    if perm is None:
        raise BadRequest("perm must be R, W or RW")
    config = TopicConfig(
        name,
        _int(data.get("readQueueNums", 8), "readQueueNums"),
        _int(data.get("writeQueueNums", 8), "writeQueueNums"),
        perm,
    )
    if not (0 < config.read_queue_nums <= 1024 and 0 < config.write_queue_nums <= 1024):
        raise BadRequest("queue numbers must be between 1 and 1024")
    cluster_name = str(data.get("cluster") or "") or None
    return _json(await views.save_topic(request.app[ADMIN_KEY], config, cluster_name))


async def delete_topic(request: web.Request) -> web.Response:
    return _json(await views.delete_topic(request.app[ADMIN_KEY], request.match_info["topic"]))


async def send_message(request: web.Request) -> web.Response:
    data = await _body(request)
    return _json(
        await views.send_test_message(
            request.app[ADMIN_KEY],
            request.match_info["topic"],
            str(data.get("body", "")),
            str(data.get("tags") or ""),
            str(data.get("keys") or ""),
        )
    )


async def groups(request: web.Request) -> web.Response:
    return _json(await views.groups_view(request.app[ADMIN_KEY]))


async def group(request: web.Request) -> web.Response:
    return _json(await views.group_view(request.app[ADMIN_KEY], request.match_info["group"]))


async def reset_offset(request: web.Request) -> web.Response:
    data = await _body(request)
    timestamp = _int(_field(data, "timestamp"), "timestamp")
    return _json(
        await views.reset_offset(
            request.app[ADMIN_KEY], request.match_info["group"], _field(data, "topic"), timestamp
        )
    )


async def skip_backlog(request: web.Request) -> web.Response:
    data = await _body(request)
    return _json(
        await views.reset_offset(
            request.app[ADMIN_KEY], request.match_info["group"], _field(data, "topic"), None
        )
    )


async def messages(request: web.Request) -> web.Response:
    return _json(
        await views.messages_by_time(
            request.app[ADMIN_KEY],
            _param(request, "topic"),
            _int(_param(request, "begin"), "begin"),
            _int(_param(request, "end"), "end"),
            _int(_param(request, "page", "1"), "page"),
            _int(_param(request, "pageSize", "20"), "pageSize"),
        )
    )


async def messages_by_key(request: web.Request) -> web.Response:
    return _json(
        await views.messages_by_key(
            request.app[ADMIN_KEY], _param(request, "topic"), _param(request, "key")
        )
    )


async def message_by_id(request: web.Request) -> web.Response:
    return _json(
        await views.message_by_id(
            request.app[ADMIN_KEY], _param(request, "id"), request.query.get("topic", "")
        )
    )


async def message_trace(request: web.Request) -> web.Response:
    return _json(await views.message_trace(request.app[ADMIN_KEY], _param(request, "id")))


async def resend(request: web.Request) -> web.Response:
    data = await _body(request)
    return _json(await views.resend_dead_letter(request.app[ADMIN_KEY], _field(data, "msgId")))


async def charts(request: web.Request) -> web.Response:
    return _json(request.app[SAMPLER_KEY].snapshot())


async def index(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(static_dir() / "index.html")


def make_app(
    admin: AdminClient, namesrv: str, writable: WriteMode, interval: float, loopback: bool = True
) -> web.Application:
    """The application; it starts the sampler on start-up and stops it and closes `admin` on
    clean-up. `loopback`: served on a loopback address (then only to loopback host names)."""
    app = web.Application(middlewares=[_loopback_only, _write_guard, _errors])
    app[LOOPBACK_KEY] = loopback
    app[ADMIN_KEY] = admin
    app[SAMPLER_KEY] = Sampler(admin, interval)
    app[WRITABLE_KEY] = writable
    app[NAMESRV_KEY] = namesrv
    app.router.add_get("/", index)
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/cluster", cluster)
    app.router.add_get("/api/topics", topics)
    app.router.add_post("/api/topics", save_topic)
    app.router.add_get("/api/topics/{topic}", topic)
    app.router.add_delete("/api/topics/{topic}", delete_topic)
    app.router.add_post("/api/topics/{topic}/send", send_message)
    app.router.add_get("/api/groups", groups)
    app.router.add_get("/api/groups/{group}", group)
    app.router.add_post("/api/groups/{group}/reset", reset_offset)
    app.router.add_post("/api/groups/{group}/skip", skip_backlog)
    app.router.add_get("/api/messages", messages)
    app.router.add_get("/api/messages/by-key", messages_by_key)
    app.router.add_get("/api/messages/by-id", message_by_id)
    app.router.add_get("/api/messages/trace", message_trace)
    app.router.add_post("/api/messages/resend", resend)
    app.router.add_get("/api/charts", charts)
    app.router.add_get("/api/producers", producers)
    app.router.add_get("/api/rocketmq5", rocketmq5)
    app.router.add_get("/api/brokers/config", broker_configs)
    app.router.add_post("/api/brokers/config", update_broker_config)
    app.router.add_get("/api/acl", acl)
    app.router.add_static("/static", static_dir())

    async def lifecycle(app: web.Application) -> Any:
        app[SAMPLER_KEY].start()
        yield
        await app[SAMPLER_KEY].stop()
        await app[ADMIN_KEY].close()

    app.cleanup_ctx.append(lifecycle)
    return app
