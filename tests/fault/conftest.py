"""Fixtures of the fault tests.

- `seed`: the seed of a test's randomness, printed; rerun a failure with TIDEMQ_FAULT_SEED=<seed>.
- `writers`: starts store writer processes (`store_writer.py`) and kills any left at the end.
- `processes`, `namesrv`, `remoting_client`, `api` come from tests/conftest.py.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fault.store_fault_check import Writers


@pytest.fixture
def seed() -> int:
    env = os.environ.get("TIDEMQ_FAULT_SEED")
    value = int(env) if env else random.SystemRandom().randrange(2**31)
    print(f"fault test seed {value} (rerun with TIDEMQ_FAULT_SEED={value})")
    return value


@pytest.fixture
def writers(tmp_path: Path) -> Iterator[Writers]:
    started = Writers(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()
