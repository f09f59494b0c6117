"""Run every benchmark section of tests/bench (see the package docstring for the convention)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import traceback

import tests.bench as bench
from tests.bench import Result


def section_names() -> list[str]:
    """Modules of this package named `<section>_bench`, in name order."""
    return sorted(
        info.name
        for info in pkgutil.iter_modules(bench.__path__)
        if info.name.endswith("_bench") and not info.ispkg
    )


def main(argv: list[str]) -> int:
    names = section_names()
    if argv:
        names = [n for n in names if any(n.startswith(prefix) for prefix in argv)]
        if not names:
            print(f"no benchmark section matches {' '.join(argv)}; have: {section_names()}")
            return 2
    summary: list[tuple[str, list[Result]]] = []
    failed: list[str] = []
    started = time.perf_counter()
    for name in names:
        section = name.removesuffix("_bench")
        print(f"\n=== {section} {'=' * (70 - len(section))}", flush=True)
        section_start = time.perf_counter()
        try:
            module = importlib.import_module(f"{bench.__name__}.{name}")
            results = list(module.run())
        except Exception:
            traceback.print_exc()
            failed.append(section)
            continue
        print(f"--- {section}: {time.perf_counter() - section_start:.0f} s", flush=True)
        summary.append((section, results))
    print(f"\n=== summary {'=' * 64}")
    for section, results in summary:
        print(f"[{section}]")
        for result in results:
            print("  " + result.line())
    for section in failed:
        print(f"[{section}] FAILED (traceback above)")
    verdicts = [r.verdict for _s, results in summary for r in results if r.verdict]
    print(
        f"\n{verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS, "
        f"{len(failed)} failed section(s), {time.perf_counter() - started:.0f} s in all"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
