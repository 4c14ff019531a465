"""The consumer-group examples, each run as a script against a real server."""

from __future__ import annotations

from liftbridge.testing import LocalServer
from tests.integration.examples import run_example


def test_consumer_group_example(server: LocalServer) -> None:
    output = run_example("consumer_group.py", server.address, timeout=100)
    assert "all 30 handled; bob leaves" in output
    assert "bob: revoked" in output
    assert "all 60 handled, none skipped" in output


def test_pinned_pair_example(server: LocalServer) -> None:
    output = run_example("pinned_pair.py", env={"LIFTBRIDGE_ADDRESS": server.address}, timeout=100)
    assert "standby is active" in output
    assert "each hand-over resumed at the committed offset + 1" in output


def test_overflow_member_example(server: LocalServer) -> None:
    output = run_example("overflow_member.py", server.address, timeout=100)
    assert "overflow member in group: False" in output
    assert "overflow member joined" in output
    assert "the overflow member handled" in output and "and left" in output


def test_pinned_group_example(server: LocalServer) -> None:
    output = run_example("pinned_group.py", server.address, timeout=100)
    assert "primary: pinned" in output
    assert "pinned: primary=True" in output
    assert "primary: unpinned (admin)" in output and "standby: pinned" in output
    assert "the pin moved whole: every partition, each message once" in output
