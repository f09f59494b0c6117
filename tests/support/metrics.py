"""Reading a daemon's Prometheus endpoint (`metricsPort`) in tests.

`scrape(port)` (blocking) and `scrape_async(port)` answer every sample of `GET /metrics` as
`{sample name: [(labels, value), ...]}`; `value_of(samples, name, **labels)` picks the one
sample whose labels include `labels`.
"""

from __future__ import annotations

import asyncio
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import LOOPBACK

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=5) as response:
        return parse(response.read().decode())


async def scrape_async(port: int) -> Samples:
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    try:
        writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    assert status == 200, f"GET /metrics answered {status}"
    return parse(body.decode())


def value_of(samples: Samples, name: str, **labels: str) -> float:
    found = [
        value
        for sample_labels, value in samples.get(name, [])
        if all(sample_labels.get(key) == wanted for key, wanted in labels.items())
    ]
    assert len(found) == 1, f"{len(found)} samples of {name} with {labels}"
    return found[0]
