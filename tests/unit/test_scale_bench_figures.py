"""The scale bench's creation figures (tests/support/scale.py): the daemons' CPU per topic over a
span counts the CPU spent creating, from the first request on, not what they spent before."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from tests.support.scale import CreationRun, create_topics, fitted_first_over_last
from tidemq.client.protocol.models import TopicConfig


class FakeAPI:
    """Creates nothing; each list costs the daemons 10 us of CPU per topic (`cpu` reads it)."""

    def __init__(self, cpu_before: float) -> None:
        self.cpu = cpu_before  # the daemons' start-up, before any request

    def request(self, *args: Any, **kwargs: Any) -> object:
        return object()

    async def call(self, broker: str, request: object, timeout: float) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeAPI:
    fake = FakeAPI(cpu_before=1.5)

    async def create_list(api: object, broker: str, configs: Sequence[TopicConfig]) -> None:
        fake.cpu += 10e-6 * len(configs)

    monkeypatch.setattr("tests.support.scale.create_topic_list", create_list)
    return fake


async def test_the_first_span_does_not_count_the_daemons_start_up(api: FakeAPI) -> None:
    run = CreationRun(batch=True)
    await create_topics(
        api,  # type: ignore[arg-type]
        "broker",
        0,
        10_000,
        batch_size=100,
        in_flight=1,
        run=run,
        cpu=lambda: api.cpu,
    )
    # 1.5 s of start-up CPU spread over the first 1,000 topics read as 1,510 us each
    assert run.cpu_us_per_topic_between(0, 0.1) == pytest.approx(10)
    assert run.cpu_us_per_topic_between(0.9, 1.0) == pytest.approx(10)


def test_the_fitted_ratio_follows_the_trend_and_not_one_tenths_lump() -> None:
    flat = [20.0] * 10
    assert fitted_first_over_last(flat) == pytest.approx(1.0)
    rising = [20.0 + i for i in range(10)]  # 20 -> 29 us a topic
    assert fitted_first_over_last(rising) == pytest.approx(20 / 29)
    # one lump in an end tenth: the two tenths alone read 0.67 (20 / 30) or 1.5, the line not
    lumped_end = [*flat[:9], 30.0]
    lumped_start = [30.0, *flat[1:]]
    assert fitted_first_over_last(lumped_end) == pytest.approx(1.0)
    assert fitted_first_over_last(lumped_start) == pytest.approx(1.0)
    assert math.isnan(fitted_first_over_last([20.0]))
    assert fitted_first_over_last([float("nan"), *rising[1:]]) == pytest.approx(20 / 29)
