"""Regenerates liftbridge_api/ from liftbridge_api/api.proto.

Usage: ``python scripts/gen_proto.py [OUT_DIR]``. With no argument the modules
are written next to api.proto; the freshness test passes a temporary folder
and compares. Generator versions are pinned in pyproject.toml's ``dev`` extra so
the output is reproducible byte for byte.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


def generate(out_dir: Path) -> None:
    """Writes the generated modules for ``liftbridge_api/api.proto`` into out_dir."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={ROOT}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            "liftbridge_api/api.proto",
        ]
        # protoc finds the mypy plugins (protoc-gen-mypy*) beside this interpreter.
        env = dict(
            os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        )
        subprocess.run(cmd, check=True, env=env)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in GENERATED:
            shutil.copyfile(Path(tmp) / "liftbridge_api" / name, out_dir / name)


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "liftbridge_api")
