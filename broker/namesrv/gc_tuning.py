"""The name server's garbage collector thresholds.

A broker's full registration of 1,000,000 topics makes the name server allocate a few million
short-lived containers (each topic's decoded JSON object and TopicConfig) while its route table
grows by a million long-lived ones (each topic's {brokerName: QueueData}). With CPython's default
thresholds (700, 10, 10) a young collection runs every 700 allocations and the table is walked
again and again by the older generations: 4.9 s of CPU for decoding and applying the 1,250 parts,
3.1 s with (10,000, 50, 50), 2.6 s with no collector at all (measured in process, same run, load
about 6; the scale3 session note). A young collection then looks at up to
10,000 objects (well under a millisecond), so route queries keep their p99.

The name server holds no reference cycles of its own that would wait longer to be freed: its
tables are trees of dicts, lists and dataclasses.
"""

from __future__ import annotations

import gc
from typing import Final

GC_THRESHOLDS: Final = (10_000, 50, 50)


def tune_gc() -> None:
    gc.set_threshold(*GC_THRESHOLDS)
