"""The committed liftbridge_api modules are exactly what `make proto` generates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)], check=True
    )
    for name in GENERATED:
        committed = (ROOT / "liftbridge_api" / name).read_bytes()
        assert (tmp_path / name).read_bytes() == committed, (
            f"liftbridge_api/{name} is stale: run `make proto` and commit the result"
        )


def test_service_has_the_sixteen_rpcs() -> None:
    from liftbridge_api import api_pb2

    methods = api_pb2.DESCRIPTOR.services_by_name["API"].methods
    assert api_pb2.DESCRIPTOR.package == "proto"
    assert len(methods) == 16
