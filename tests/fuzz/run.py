"""One fuzz target under atheris: `python -m tests.fuzz.run TARGET [libFuzzer options] [dirs]`.

libFuzzer's options apply (`-runs=N`, `-seed=S`, `-timeout=S`, `-rss_limit_mb=M`,
`-artifact_prefix=DIR/`, ...); the first directory receives the inputs that find new coverage,
the others are read as seeds. tidemq's modules are instrumented for coverage as they import.
"""

from __future__ import annotations

import sys

import atheris  # type: ignore[import-untyped]


def main() -> None:
    name = sys.argv[1]
    with atheris.instrument_imports(include=["tidemq"]):
        from tests.fuzz.targets import TARGETS

        if name in ("spark_columns", "pull_body", "acl_file"):
            # imported by the target at its first call: instrumented here
            import tidemq.broker.acl.rules
            import tidemq.client.consumer.received
            import tidemq.client.spark.records  # noqa: F401
    target = TARGETS[name].run
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
