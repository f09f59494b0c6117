"""A bound on how many segment files are mapped at once (`maxMappedConsumeQueueFiles`).

A broker with a million topics of eight queues cannot hold a map per ConsumeQueue file: each
open file costs two descriptors (ours for appends, and the duplicate Python's mmap keeps), a
kernel map entry (vm.max_map_count, 65530 by default) and the resident pages it touched.
Segments made with a budget are opened and mapped when first read or written and registered
here; past the bound, the least recently used one is closed and unmapped
(`Segment.release_map`) and opens itself again on its next use. The budget is touched on the
event loop only (flushes in worker threads open the file themselves and never map it).

The budget also holds the files being made in a worker thread (`creating`: path -> the future
of `segment.create_sparse`), for the queue that needs one to adopt (`adopt`); dispatch makes a
new queue's file off the event loop that way (store/dispatch.py). `discard_creations` removes
those nobody adopted (at stop: they never held a unit).
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol


class Mappable(Protocol):
    def release_map(self) -> None: ...


class MapBudget:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a map budget needs at least one map, got {limit}")
        self.limit = limit
        self._open: OrderedDict[Mappable, None] = OrderedDict()
        self.maps_opened = 0  # every map made, for tests and the bench
        self.maps_released = 0  # every map given back because the budget was full
        # Files being made off the loop: path -> (descriptor, folders to sync at first flush).
        self.creating: dict[Path, Future[tuple[int, tuple[Path, ...]]]] = {}

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, segment: Mappable) -> None:
        """`segment` has just mapped its file: count it, unmapping the least recently used past
        the limit (never `segment` itself, which is the most recent)."""
        self._open[segment] = None
        self.maps_opened += 1
        while len(self._open) > self.limit:
            victim, _ = self._open.popitem(last=False)
            self.maps_released += 1
            victim.release_map()

    def touch(self, segment: Mappable) -> None:
        """`segment` is used: it becomes the most recently used."""
        self._open.move_to_end(segment)

    def forget(self, segment: Mappable) -> None:
        """`segment` was unmapped by its owner (closed or destroyed)."""
        self._open.pop(segment, None)

    def adopt(self, path: Path) -> tuple[int, tuple[Path, ...]] | None:
        """The file made off the loop for `path`, if one was asked for (waiting for the worker
        if it is still at it; its error, such as a full disk, is raised here)."""
        future = self.creating.pop(path, None)
        return None if future is None else future.result()

    def discard_creations(self) -> None:
        """Close and remove the files made off the loop that no queue adopted."""
        creating, self.creating = self.creating, {}
        for path, future in creating.items():
            with contextlib.suppress(Exception):
                fd, _ = future.result()
                os.close(fd)
                path.unlink(missing_ok=True)
