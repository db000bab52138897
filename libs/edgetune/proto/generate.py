"""Regenerate the Python stubs of ``protos/edgetune/v1/*.proto`` (``make protos``).

    python -m edgetune.proto.generate            # write libs/edgetune/proto/v1/
    python -m edgetune.proto.generate --check    # exit 1 listing stale stubs
    python -m edgetune.proto.generate --out DIR  # write elsewhere

Runs ``grpc_tools.protoc`` with the Python, gRPC and mypy-protobuf plugins. The protos live
under ``edgetune/v1/`` (their package path, and the file names reflection clients see), so
protoc writes ``from edgetune.v1 import common_pb2``; the stubs are installed as
``edgetune.proto.v1``, so those imports are rewritten. Output is deterministic: the same
protos and tool versions give the same bytes, which the freshness test relies on.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

#: Repository root (libs/edgetune/proto/generate.py -> four levels up).
REPO_ROOT = Path(__file__).resolve().parents[3]
PROTO_ROOT = REPO_ROOT / "protos"
PROTO_PACKAGE_DIR = "edgetune/v1"
DEFAULT_OUT = Path(__file__).resolve().parent / "v1"

#: Files the generator owns in the output folder (anything else there, e.g. __init__.py, is kept).
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")

# `from edgetune.v1 import x_pb2` (protoc, grpc plugin) and `import edgetune.v1.x_pb2` /
# `edgetune.v1.x_pb2.Msg` (mypy-protobuf). Only module paths ending in _pb2/_pb2_grpc are
# touched, never proto full names such as "edgetune.v1.PowerMode".
_FROM_IMPORT = re.compile(r"^from edgetune\.v1 import ", re.MULTILINE)
_MODULE_PATH = re.compile(r"\bedgetune\.v1\.(\w+_pb2(?:_grpc)?)\b")


def proto_files() -> list[str]:
    """The .proto files to compile, relative to ``protos/``, sorted."""
    return sorted(f"{PROTO_PACKAGE_DIR}/{p.name}" for p in (PROTO_ROOT / PROTO_PACKAGE_DIR).glob("*.proto"))


def _plugin(name: str) -> str:
    # The plugins are console scripts of mypy-protobuf, next to this interpreter in a venv.
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    path = shutil.which(name, path=search)
    if path is None:
        raise SystemExit(f"{name} not found: install mypy-protobuf (the [dev] extra)")
    return path


def _rewrite_imports(text: str) -> str:
    text = _FROM_IMPORT.sub("from edgetune.proto.v1 import ", text)
    return _MODULE_PATH.sub(r"edgetune.proto.v1.\1", text)


def generate(out_dir: Path) -> list[Path]:
    """Compile every proto into ``out_dir`` (flat: ``common_pb2.py`` ...); return the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory(prefix="edgetune-protoc-") as tmp:
        # In a subprocess: protoc writes to the process's fds, and a failed compile must not
        # take the caller down with it.
        cmd = [
            sys.executable, "-m", "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            *proto_files(),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"protoc failed ({proc.returncode}):\n{proc.stderr}")
        written = []
        for src in sorted((Path(tmp) / PROTO_PACKAGE_DIR).iterdir()):
            if not src.name.endswith(GENERATED_SUFFIXES):
                continue
            dst = out_dir / src.name
            dst.write_text(_rewrite_imports(src.read_text(encoding="utf-8")), encoding="utf-8", newline="\n")
            written.append(dst)
    return written


def _generated_in(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name.endswith(GENERATED_SUFFIXES)}


def stale(out_dir: Path = DEFAULT_OUT) -> list[str]:
    """Names of stubs in ``out_dir`` that differ from a fresh generation (missing, changed, extra)."""
    with tempfile.TemporaryDirectory(prefix="edgetune-protos-check-") as tmp:
        generate(Path(tmp))
        fresh = _generated_in(Path(tmp))
    current = _generated_in(Path(out_dir))
    problems = []
    for name in sorted(fresh.keys() | current.keys()):
        if name not in current:
            problems.append(f"{name} (missing)")
        elif name not in fresh:
            problems.append(f"{name} (no .proto generates it)")
        elif fresh[name] != current[name]:
            problems.append(f"{name} (out of date)")
    return problems


def _remove_orphans(out_dir: Path, written: list[Path]) -> None:
    keep = {p.name for p in written}
    for name in _generated_in(out_dir):
        if name not in keep:
            (out_dir / name).unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edgetune.proto.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when stubs are stale")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale(args.out)
        if problems:
            print(f"stale protobuf stubs in {args.out} (run `make protos`):", file=sys.stderr)
            for line in problems:
                print(f"  {line}", file=sys.stderr)
            return 1
        print(f"protobuf stubs in {args.out} are up to date")
        return 0
    written = generate(args.out)
    _remove_orphans(args.out, written)
    print(f"wrote {len(written)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
