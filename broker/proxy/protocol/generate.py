"""Generate the Python modules of the RocketMQ 5 protocol from the `.proto` files beside this one.

`make install` runs `python broker/proxy/protocol/generate.py` (grpcio-tools' bundled protoc):
`definition.proto` and `service.proto` become `definition_pb2.py` and `service_pb2.py` with
their `.pyi` stubs (mypy-protobuf's, typed for mypy --strict). They are build products:
git-ignored, made again when a `.proto` is newer than its module.

protoc names a module after the path it was given, so the files are compiled from a scratch
tree where they sit at `tidemq/broker/proxy/protocol/` (service.proto imports definition.proto
by that path): the generated imports are then the installed package's absolute ones. No
`_pb2_grpc` module is generated: the server registers its handlers itself
(broker/proxy/server.py).

Runs without tidemq installed (only grpcio-tools and mypy-protobuf), from any directory.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_PATH = Path("tidemq", "broker", "proxy", "protocol")
PROTOS = ("definition.proto", "service.proto")
SUFFIXES = ("_pb2.py", "_pb2.pyi")


def outputs(proto: str) -> list[Path]:
    stem = proto.removesuffix(".proto")
    return [HERE / f"{stem}{suffix}" for suffix in SUFFIXES]


def up_to_date() -> bool:
    newest_source = max((HERE / p).stat().st_mtime for p in (*PROTOS, "generate.py"))
    generated = [path for proto in PROTOS for path in outputs(proto)]
    return all(p.exists() and p.stat().st_mtime >= newest_source for p in generated)


def mypy_plugin() -> str:
    """protoc-gen-mypy from mypy-protobuf, installed beside this interpreter's scripts."""
    name = "protoc-gen-mypy"
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder, name)
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise SystemExit("generate.py: protoc-gen-mypy not found: pip install mypy-protobuf")
    return found


def generate() -> None:
    from grpc_tools import protoc  # a build-time tool, imported only when generating

    well_known = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        tree = root / PACKAGE_PATH
        tree.mkdir(parents=True)
        for proto in PROTOS:
            shutil.copy(HERE / proto, tree / proto)
        args = [
            "protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--plugin=protoc-gen-mypy={mypy_plugin()}",
            f"--python_out={root}",
            f"--mypy_out={root}",
            *(str(PACKAGE_PATH / proto) for proto in PROTOS),
        ]
        status = protoc.main(args)
        if status != 0:
            raise SystemExit(f"generate.py: protoc failed with status {status}")
        for proto in PROTOS:
            for target in outputs(proto):
                shutil.copy(tree / target.name, target)


def main() -> None:
    if "--force" in sys.argv[1:] or not up_to_date():
        generate()


if __name__ == "__main__":
    main()
