"""The request fuzzer's results: `Finding`s (what broke, and the requests that led to it),
the `Report` of a run (figures: requests per second, requests and seconds per code, answers
by response code; its findings, one line per distinct one) and `save`, which writes one JSON
file per distinct finding (`<kind>-<n>.json`: the requests, replayable with
`tests.fuzz.requests.replay`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tests.fuzz.request_steps import Step

__all__ = ["Finding", "Report", "save"]

# numbers fold in a signature, except a request code's
_NUMBERS: Final = re.compile(r"(?<![\d])(?<!code )\d+")


@dataclass
class Finding:
    # outside-store, no-answer, closed, died, memory, traceback, dispatch, illegal-name, lost,
    # restart
    kind: str
    detail: str
    steps: list[Step] = field(default_factory=list)
    key: str = ""  # when set, the signature (the detail names one of many values)

    @property
    def signature(self) -> str:
        """What makes two findings the same bug (numbers and long values folded)."""
        text = self.key or _NUMBERS.sub("N", self.detail)[:160]
        return f"{self.kind}: {text}"

    def to_json(self, seed: int | None) -> dict[str, Any]:
        return {
            "seed": seed,
            "kind": self.kind,
            "detail": self.detail,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass
class Report:
    seed: int | None
    seconds: float = 0.0
    requests: int = 0
    per_code: Counter[str] = field(default_factory=Counter)
    seconds_per_code: dict[str, float] = field(default_factory=dict)
    answers: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    saved: list[Path] = field(default_factory=list)
    tracked: int = 0

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        lines = [
            f"seed {self.seed}: {self.requests} requests in {self.seconds:.1f} s "
            f"({self.rate:.0f}/s), {self.tracked} acknowledged messages checked, "
            f"{len(self.findings)} findings"
        ]
        lines += [
            f"  {name:38} {n:6} requests {self.seconds_per_code.get(name, 0.0):7.2f} s"
            for name, n in sorted(self.per_code.items())
        ]
        lines.append("  answers: " + ", ".join(f"{k} {v}" for k, v in self.answers.most_common()))
        unique: dict[str, Finding] = {}
        for finding in self.findings:
            unique.setdefault(finding.signature, finding)
        for signature in unique:
            lines.append(f"  FINDING {signature}")
        lines += [f"  saved: {path}" for path in self.saved]
        return "\n".join(lines)


def save(report: Report, out: Path) -> None:
    """One file per distinct finding: `<kind>-<n>.json` holding its requests."""
    out.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for finding in report.findings:
        if finding.signature in seen:
            continue
        seen.add(finding.signature)
        path = out / f"{finding.kind}-{len(report.saved)}.json"
        path.write_text(json.dumps(finding.to_json(report.seed), indent=1, ensure_ascii=True))
        report.saved.append(path)
