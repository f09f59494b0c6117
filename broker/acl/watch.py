"""Where the broker's ACL files are, and their reload when they change (AclFileWatchService).

The files: the one named by `aclFile` when it is set; otherwise RocketMQ's,
`$ROCKETMQ_HOME/conf/plain_acl.yml` and every `*.yml`/`*.yaml` under `$ROCKETMQ_HOME/conf/acl/`
(sorted by path, the folder's before plain_acl.yml; an access key defined twice keeps its first
definition).

`AclWatcher` loads them once at start (a bad file then stops start-up, naming it), then looks at
the files' sizes, change times and inodes every `interval` seconds (and at the folder's list of
files): on a change it reads them all again and swaps the validator's rules at once. A change
that does not load (not YAML, a short key, an unknown permission word, ...) keeps the last good
rules and logs one line naming the problem; the next change is read again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from tidemq.broker.acl.rules import AclFileError, AclRules, load_rules
from tidemq.common.errors import ConfigError
from tidemq.common.lifecycle import BackgroundTask, Service

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5  # seconds; RocketMQ's watcher looks every 500 ms too
Stamp = tuple[tuple[str, int, int, int], ...]


def acl_paths(acl_file: str, rocketmq_home: str | None) -> list[Path]:
    """The ACL files to read now (see the module docstring)."""
    if acl_file:
        return [Path(acl_file)]
    if not rocketmq_home:
        raise ConfigError("aclEnable: set aclFile, or ROCKETMQ_HOME for conf/plain_acl.yml")
    conf = Path(rocketmq_home) / "conf"
    folder = conf / "acl"
    listed = (
        sorted(p for p in folder.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file())
        if folder.is_dir()
        else []
    )
    return [*listed, conf / "plain_acl.yml"]


def _stamp(paths: list[Path]) -> Stamp:
    stamps = []
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            stamps.append((str(path), -1, -1, -1))
        else:
            stamps.append((str(path), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(stamps)


class AclWatcher(Service):
    """Loads the ACL files and reloads them on change into `apply` (the validator's setter)."""

    def __init__(
        self,
        find_paths: Callable[[], list[Path]],
        apply: Callable[[AclRules], None],
        interval: float = DEFAULT_INTERVAL,
    ) -> None:
        super().__init__()
        self._find_paths = find_paths
        self._apply = apply
        self.interval = interval
        self._stamp: Stamp = ()
        self.reloads = 0  # successful loads after the first, for tests and status

    def load_now(self) -> None:
        """The first load: a bad file is a `ConfigError` naming it."""
        paths = self._find_paths()
        self._stamp = _stamp(paths)
        try:
            rules = load_rules(paths)
        except AclFileError as exc:
            raise ConfigError(f"aclFile: {exc}") from None
        self._apply(rules)
        log.info("ACL: %d accounts from %s", len(rules.accounts), ", ".join(map(str, paths)))

    async def on_start(self) -> None:
        self.load_now()
        await self.start_child(BackgroundTask(self._watch, "acl-watch"))

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.poll()

    def poll(self) -> bool:
        """Reload when the files changed; True when new rules were applied."""
        paths = self._find_paths()
        stamp = _stamp(paths)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            rules = load_rules(paths)
        except AclFileError as exc:
            log.error("ACL: keeping the previous rules: %s", exc)
            return False
        self._apply(rules)
        self.reloads += 1
        log.info("ACL: reloaded, %d accounts", len(rules.accounts))
        return True


def rocketmq_home() -> str | None:
    return os.environ.get("ROCKETMQ_HOME")
