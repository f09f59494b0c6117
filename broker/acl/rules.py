"""The rules of RocketMQ's plain ACL, read from `plain_acl.yml` files (PlainPermissionManager).

File format (YAML; every key optional)::

    globalWhiteRemoteAddresses:       # peers matching any of these need no signature
      - 10.10.103.*
    accounts:
      - accessKey: RocketMQ           # more than 6 characters
        secretKey: 12345678           # more than 6 characters (a YAML number is read as text)
        whiteRemoteAddress: 192.168.0.*   # this account's peers need no signature
        admin: false                  # admin requests (topic/group create, delete, config)
        defaultTopicPerm: DENY        # for topics not in topicPerms (missing: DENY)
        defaultGroupPerm: SUB         # for groups not in groupPerms (missing: DENY)
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

A permission is `PUB`, `SUB`, `PUB|SUB` (or `SUB|PUB`) or `DENY`. Group permissions are kept
under the group's retry topic (`%RETRY%group`), as RocketMQ keeps them, so a resource name tells
topic from group. Address patterns are `broker.acl.addresses`'.

Where RocketMQ quietly reads an unknown permission word as DENY, we refuse the file: a typo
would otherwise lock an account out (or, in a default, let it do less than meant) with no word
said. Anything else wrong (not YAML, a short key, a bad address pattern, a malformed entry) is
an `AclFileError` naming the file and the entry; the caller keeps its last good rules. An empty
file holds no rules. An access key defined twice keeps its first definition, with a warning
(RocketMQ's rule across files).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from tidemq.broker.acl.addresses import AddressMatcher, AddressPatternError, address_matcher
from tidemq.client.remoting.signing import signing_key
from tidemq.common.errors import TideMQError
from tidemq.common.mac import Mac

log = logging.getLogger(__name__)

DENY: Final = 1
ANY: Final = 2
PUB: Final = 4
SUB: Final = 8
PERMISSION_WORDS: Final = {
    "PUB": PUB,
    "SUB": SUB,
    "PUB|SUB": PUB | SUB,
    "SUB|PUB": PUB | SUB,
    "DENY": DENY,
}
RETRY_PREFIX: Final = "%RETRY%"
KEY_MIN_LENGTH: Final = 6  # both keys must be longer (AclConstants)


class AclFileError(TideMQError):
    """A plain ACL file that cannot be used, with the reason."""


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def permission_allows(needed: int, owned: int) -> bool:
    """RocketMQ's Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white_address: AddressMatcher = field(repr=False)
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    # Topics by name, groups by retry topic; None when the account lists neither (an admin
    # without lists may do everything, as in RocketMQ).
    perms: Mapping[str, int] | None = None
    signing_key: Mac = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "signing_key", signing_key(self.secret_key))


@dataclass(frozen=True, slots=True)
class AclRules:
    """What every ACL file says, merged."""

    global_white: tuple[AddressMatcher, ...] = ()
    accounts: Mapping[str, Account] = field(default_factory=dict)


def load_rules(paths: Iterable[Path]) -> AclRules:
    """The rules of `paths` (in order), or `AclFileError` for the first bad file."""
    white: list[AddressMatcher] = []
    accounts: dict[str, Account] = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue  # RocketMQ reads a missing file as an empty one
        except (OSError, UnicodeDecodeError) as exc:
            raise AclFileError(f"{path}: cannot be read: {exc}") from exc
        file_white, file_accounts = parse_document(text, str(path))
        white.extend(file_white)
        for account in file_accounts:
            if account.access_key in accounts:
                log.warning("ACL: accessKey %s in %s is defined before", account.access_key, path)
                continue
            accounts[account.access_key] = account
    return AclRules(tuple(white), accounts)


def parse_document(text: str, source: str) -> tuple[list[AddressMatcher], list[Account]]:
    """The global white list and the accounts of one file's text."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        reason = " ".join(str(exc).split())
        raise AclFileError(f"{source}: not YAML: {reason}") from None
    if document is None:
        return [], []
    if not isinstance(document, dict):
        raise AclFileError(f"{source}: the top level is not a mapping")
    white = [
        _matcher(pattern, f"{source}: globalWhiteRemoteAddresses")
        for pattern in _list(document, "globalWhiteRemoteAddresses", source)
    ]
    accounts = []
    for index, entry in enumerate(_list(document, "accounts", source)):
        where = f"{source}: accounts[{index}]"
        if not isinstance(entry, dict):
            raise AclFileError(f"{where}: is not a mapping")
        accounts.append(_account(entry, where))
    return white, accounts


def _list(document: Mapping[str, Any], key: str, source: str) -> list[Any]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise AclFileError(f"{source}: {key} is not a list")
    return value


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise AclFileError(f"{where}: {key} is not text: {value!r}")
    return str(value)  # 12345678 unquoted is a YAML number; Java reads it as text


def _account(entry: Mapping[str, Any], where: str) -> Account:
    access_key = _text(entry, "accessKey", where)
    secret_key = _text(entry, "secretKey", where)
    if access_key is None or len(access_key) <= KEY_MIN_LENGTH:
        raise AclFileError(f"{where}: accessKey must be longer than {KEY_MIN_LENGTH} characters")
    where = f"{where} (accessKey {access_key})"
    if secret_key is None or len(secret_key) <= KEY_MIN_LENGTH:
        raise AclFileError(f"{where}: secretKey must be longer than {KEY_MIN_LENGTH} characters")
    perms: dict[str, int] = {}
    listed = False
    for key, is_topic in (("topicPerms", True), ("groupPerms", False)):
        for item in _list(entry, key, where):
            listed = True
            name, perm = _resource(item, f"{where}: {key}")
            perms[name if is_topic else retry_topic(name)] = perm
    return Account(
        access_key,
        secret_key,
        _matcher(_text(entry, "whiteRemoteAddress", where), f"{where}: whiteRemoteAddress"),
        _admin(entry.get("admin"), where),
        _permission(_text(entry, "defaultTopicPerm", where), f"{where}: defaultTopicPerm"),
        _permission(_text(entry, "defaultGroupPerm", where), f"{where}: defaultGroupPerm"),
        perms if listed else None,
    )


def _admin(value: Any, where: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclFileError(f"{where}: admin is not true or false: {value!r}")


def _permission(word: str | None, where: str) -> int:
    if word is None:
        return DENY  # RocketMQ's parsePermFromString(null)
    perm = PERMISSION_WORDS.get(word.strip())
    if perm is None:
        raise AclFileError(f"{where}: unknown permission {word!r} (PUB, SUB, PUB|SUB or DENY)")
    return perm


def _resource(item: Any, where: str) -> tuple[str, int]:
    if not isinstance(item, str):
        raise AclFileError(f"{where}: {item!r} is not text of the form name=PERM")
    parts = [part for part in item.split("=") if part]  # StringUtils.split drops empty tokens
    if len(parts) != 2 or not parts[0].strip():
        raise AclFileError(f"{where}: {item!r} is not of the form name=PERM")
    return parts[0].strip(), _permission(parts[1], f"{where}: {item!r}")


def _matcher(pattern: Any, where: str) -> AddressMatcher:
    if pattern is not None and not isinstance(pattern, str):
        raise AclFileError(f"{where}: {pattern!r} is not an address pattern")
    try:
        return address_matcher(pattern)
    except AddressPatternError as exc:
        raise AclFileError(f"{where}: {exc}") from None
