"""The publish options type-check as documented: mypy --strict (the project's
settings) reads a snippet of calls to the three publishers. ``publish`` returns
an ``Ack`` unless ``ack_policy`` may be NONE, every publisher takes bytes-like
values, NatsStreamPublisher takes ``correlation_id``, and an option a publisher
does not take is a type error (as it is a TypeError at run time)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api", reason="mypy is a dev dependency")

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
import liftbridge
from liftbridge import AckPolicy

def calls(
    client: liftbridge.Client,
    stream_pub: liftbridge.NatsStreamPublisher,
    nats_pub: liftbridge.NatsPublisher,
    policy: AckPolicy,
) -> None:
    offset: int = client.publish("s", b"v").offset
    offset = client.publish("s", bytearray(b"v"), ack_policy=AckPolicy.ALL).offset
    offset = stream_pub.publish("s", memoryview(b"v"), key=bytearray(b"k")).offset
    offset = nats_pub.publish("s", b"v", headers={"h": memoryview(b"x")}).offset
    offset = stream_pub.publish("s", b"v", correlation_id="c", expected_offset=3).offset
    nothing: None = client.publish("s", b"v", ack_policy=AckPolicy.NONE)
    maybe: liftbridge.Ack | None = client.publish("s", b"v", ack_policy=policy)
    options: liftbridge.StreamPublishOptions = {"key": b"k", "partition": 1}
    offset = stream_pub.publish("s", b"v", **options).offset
    offset = client.publish("s", b"v", ack_inbox="inbox", **options).offset
"""

BAD = """
import liftbridge
from liftbridge import AckPolicy

def calls(
    client: liftbridge.Client,
    stream_pub: liftbridge.NatsStreamPublisher,
    nats_pub: liftbridge.NatsPublisher,
    policy: AckPolicy,
) -> None:
    client.publish("s", b"v", ack_policy=policy).offset  # line 11: may be None
    client.publish("s", b"v", ack_policy=AckPolicy.NONE).offset  # 12: None
    stream_pub.publish("s", b"v", ack_inbox="inbox")  # 13: not a NATS option
    nats_pub.publish("s", b"v", partition=1)  # 14: a subject has no partitions
    client.publish("s", b"v", expected_ofset=1)  # 15: misspelt
    client.publish("s", b"v", key="text")  # 16: str is not bytes
"""


def _mypy(tmp_path: Path, source: str) -> tuple[str, int]:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(source)
    stdout, stderr, status = mypy_api.run(
        [
            "--config-file",
            str(ROOT / "setup.cfg"),
            "--cache-dir",
            # One cache per interpreter: `make test` runs the 3.12 and 3.13
            # sessions at once, and two mypys must not write one cache.
            str(ROOT / ".mypy_cache" / f"typing-test-{sys.version_info[0]}.{sys.version_info[1]}"),
            "--no-error-summary",
            "--show-error-codes",
            str(snippet),
        ]
    )
    return stdout + stderr, status


# Each test runs mypy in a subprocess: past the suite's 120 s once on a two-core
# machine at load 15-18.
pytestmark = pytest.mark.timeout(300)


def test_the_documented_calls_type_check(tmp_path: Path) -> None:
    output, status = _mypy(tmp_path, GOOD)
    assert status == 0, output


def test_misuse_is_a_type_error_on_its_line(tmp_path: Path) -> None:
    output, status = _mypy(tmp_path, BAD)
    assert status == 1, output
    lines = {int(m.group(1)) for m in re.finditer(r"snippet\.py:(\d+): error", output)}
    assert lines == {11, 12, 13, 14, 15, 16}, output
