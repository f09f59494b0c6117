"""The client APIs as a user's type checker sees them: mypy --strict on a user's programs.

Both APIs' constructors and methods have typed signatures (no `**kwargs: Any` that lets any
typo through), so a misspelt parameter or a value of the wrong type fails the check, in the
blocking classes as in the asyncio ones; the README's tidemq quick starts pass it. Every public
class, method and property of the API has a docstring, and each blocking twin takes exactly
its asyncio class's parameters.

mypy runs once over every program (a cold check of the package takes seconds), reading tidemq
from the typing tree `make install` links (.venv/typing, as pyproject.toml's mypy_path), with
errors reported for the programs only.
"""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import tidemq
from tidemq.client.message import ReceivedMessage, SendResult
from tidemq.client.sync import BlockingTwin

REPO_ROOT = Path(__file__).resolve().parents[2]
TYPING_TREE = REPO_ROOT / ".venv" / "typing"
README = REPO_ROOT / "README.md"

TYPOS = """\
from tidemq import AsyncProducer, ClientConfig, Message, Producer, PushConsumer, ReceivedMessage

Producer("PG", retry_tims=3)
PushConsumer("CG", orderly="yes")
AsyncProducer("PG", retry_tims=3)
Producer("PG").send(Message("T", b"x"), timout=1.0)
ClientConfig.create("127.0.0.1:9876", poll_name_sever_interval=1.0)


def listener(msg: ReceivedMessage) -> None:
    keys: tuple[str, ...] = msg.keys
"""
# (line, what mypy says) for each mistake above.
TYPO_ERRORS = [
    (3, 'Unexpected keyword argument "retry_tims" for "Producer"'),
    (4, 'Argument "orderly" to "PushConsumer" has incompatible type "str"; expected "bool"'),
    (5, 'Unexpected keyword argument "retry_tims" for "AsyncProducer"'),
    (6, 'Unexpected keyword argument "timout" for "send" of "Producer"'),
    (7, 'Unexpected keyword argument "poll_name_sever_interval" for "create" of "ClientConfig"'),
    (11, "Incompatible types in assignment"),
]

TYPED_USE = """\
from tidemq import ClientConfig, ConsumeFromWhere, ConsumeResult, PushConsumer, ReceivedMessage
from tidemq import LocalTransactionState, Message, MessageModel, TransactionProducer


def listener(msg: ReceivedMessage) -> ConsumeResult:
    keys: str | None = msg.keys
    first: list[str] = msg.key_list
    print(keys, first, msg.properties.get("KEYS"))
    return ConsumeResult.SUCCESS


def execute(msg: Message, arg: object) -> LocalTransactionState:
    return LocalTransactionState.COMMIT


config = ClientConfig.create("127.0.0.1:9876", poll_name_server_interval=1.0)
consumer = PushConsumer(
    "CG",
    config=config,
    orderly=True,
    max_concurrency=4,
    message_model=MessageModel.BROADCASTING,
    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
)
consumer.subscribe("T", "*", listener)
producer = TransactionProducer(
    "PG", execute=execute, check=lambda m: LocalTransactionState.COMMIT, retry_times=3
)
"""


def tidemq_quick_starts() -> list[str]:
    section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return [b for b in blocks if "from tidemq import" in b]


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """{program name: mypy's error lines about it} for every program, from one run."""
    if not (TYPING_TREE / "tidemq").is_dir():
        pytest.fail(f"no typing tree at {TYPING_TREE}: run make install")
    folder = tmp_path_factory.mktemp("programs")
    programs = {"typos.py": TYPOS, "typed_use.py": TYPED_USE}
    quick_starts = tidemq_quick_starts()
    assert len(quick_starts) >= 2  # the blocking one and the asyncio one, at least
    programs |= {f"quick_start_{i}.py": block for i, block in enumerate(quick_starts)}
    for name, text in programs.items():
        (folder / name).write_text(text)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file=",
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--cache-dir",
            str(folder / ".mypy_cache"),
            *programs,
        ],
        cwd=folder,
        env={"MYPYPATH": str(TYPING_TREE), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    errors: dict[str, list[str]] = {name: [] for name in programs}
    for line in done.stdout.splitlines():
        name = line.split(":", 1)[0]
        assert name in errors, f"mypy reported on something else: {line}"
        if ": error: " in line:
            errors[name].append(line)
    return errors


def test_mistakes_in_a_user_s_program_fail_the_check(mypy_errors: dict[str, list[str]]) -> None:
    found = mypy_errors["typos.py"]
    for line, message in TYPO_ERRORS:
        assert any(e.startswith(f"typos.py:{line}: error: {message}") for e in found), (
            line,
            message,
            found,
        )
    assert len(found) == len(TYPO_ERRORS), found


def test_typed_use_and_the_readme_quick_starts_pass(mypy_errors: dict[str, list[str]]) -> None:
    assert mypy_errors["typed_use.py"] == []
    quick_starts = [name for name in mypy_errors if name.startswith("quick_start_")]
    assert len(quick_starts) >= 2
    for name in quick_starts:
        assert mypy_errors[name] == [], mypy_errors[name]


API_CLASSES: list[type[Any]] = [
    c for c in (getattr(tidemq, name) for name in tidemq.__all__) if inspect.isclass(c)
]


def _public_members(cls: type[Any]) -> list[tuple[str, Any]]:
    out = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
        if owner is None or owner.__module__ in ("builtins", "enum"):
            continue  # Python's own (an exception's args, an enum's name)
        static = inspect.getattr_static(cls, name)
        if isinstance(static, property) or callable(getattr(cls, name)):
            out.append((name, static))
    return out


@pytest.mark.parametrize("cls", API_CLASSES, ids=lambda c: c.__name__)
def test_every_public_class_method_and_property_has_a_docstring(cls: type[Any]) -> None:
    assert cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("), cls
    undocumented = [
        name
        for name, member in _public_members(cls)
        if not (member.__func__ if isinstance(member, classmethod) else member).__doc__
    ]
    assert undocumented == [], f"{cls.__name__}: {undocumented}"


@pytest.mark.parametrize("cls", API_CLASSES, ids=lambda c: c.__name__)
def test_no_public_signature_takes_untyped_keywords(cls: type[Any]) -> None:
    loose = []
    for name, member in [("__init__", cls.__dict__.get("__init__")), *_public_members(cls)]:
        function = member.__func__ if isinstance(member, classmethod | staticmethod) else member
        if not inspect.isfunction(function):
            continue
        for parameter in inspect.signature(function).parameters.values():
            if parameter.kind is parameter.VAR_KEYWORD and parameter.annotation in ("Any", Any):
                loose.append(f"{name}(**{parameter.name})")
    assert loose == [], f"{cls.__name__}: {loose}"


@pytest.mark.parametrize(
    "blocking",
    [c for c in API_CLASSES if issubclass(c, BlockingTwin)],
    ids=lambda c: c.__name__,
)
def test_each_blocking_twin_takes_its_async_class_s_parameters(blocking: type[Any]) -> None:
    twin = getattr(tidemq, f"Async{blocking.__name__}")
    mine, theirs = inspect.signature(blocking.__init__), inspect.signature(twin.__init__)
    assert list(mine.parameters) == list(theirs.parameters)
    for name, parameter in mine.parameters.items():
        other = theirs.parameters[name]
        assert (parameter.kind, parameter.default) == (other.kind, other.default), name
        if name not in ("execute", "check"):  # plain callbacks in the blocking twin
            assert parameter.annotation == other.annotation, name


def test_received_keys_is_one_str_as_rocketmq_s_get_keys() -> None:
    fields: dict[str, Any] = {
        "topic": "T", "body": b"", "tags": None, "properties": {}, "msg_id": "I",
        "offset_msg_id": "O", "queue_id": 0, "queue_offset": 0, "broker_name": "b",
        "store_timestamp": 0, "born_timestamp": 0, "reconsume_times": 0,
        "commit_log_offset": 0, "store_host": "h:1", "born_host": "h:2", "sys_flag": 0,
        "flag": 0,
    }  # fmt: skip
    msg = ReceivedMessage(keys="order-1 order-2", **fields)
    assert (msg.keys, msg.key_list) == ("order-1 order-2", ["order-1", "order-2"])
    assert ReceivedMessage(keys=None, **fields).key_list == []
    assert SendResult.__doc__
