"""Every example runs to completion against a real server."""

from __future__ import annotations

from liftbridge.testing import LocalServer
from tests.integration.examples import run_example


def test_demo_against_the_session_server(server: LocalServer) -> None:
    out = run_example("demo.py", server.address)
    assert "created stream 'demo-orders'" in out
    assert "partition 0: high watermark" in out
    assert out.rstrip().endswith("done.")


def test_demo_starts_its_own_server() -> None:
    out = run_example("demo.py")
    assert "starting a local Liftbridge server" in out
    assert out.rstrip().endswith("done.")


def test_resume_from_cursor_continues_where_it_stopped(
    server: LocalServer, unique_name: str
) -> None:
    import liftbridge

    with liftbridge.Client(server.address) as client:
        client.create_stream(unique_name)
        for i in range(8):
            client.publish(unique_name, b"job %d" % i)
    first = run_example("resume_from_cursor.py", server.address, unique_name, "--batch", "5")
    assert "resuming at 0" in first and "processed offset 4: job 4" in first
    second = run_example("resume_from_cursor.py", server.address, unique_name, "--batch", "3")
    assert "cursor at 4; resuming at 5" in second
    assert "processed offset 5: job 5" in second and "processed offset 7: job 7" in second
    assert "offset 4:" not in second


def test_pull_worker_resumes_after_its_commit(server: LocalServer, unique_name: str) -> None:
    import liftbridge

    with liftbridge.Client(server.address) as client:
        client.create_stream(unique_name)
        for i in range(6):
            client.publish(unique_name, b"job %d" % i)
        first = run_example("pull_worker.py", server.address, unique_name, "--batch", "4")
        assert "batch of 4: offsets 0..3" in first and "batch of 2: offsets 4..5" in first
        assert "position {0: 5}" in first and "offset 0 holds 'job 0'" in first
        for i in range(6, 9):
            client.publish(unique_name, b"job %d" % i)
    second = run_example("pull_worker.py", server.address, unique_name, "--batch", "4")
    assert "batch of 3: offsets 6..8" in second and "offsets 0.." not in second


def test_nats_bulk_publish_stores_every_order(server: LocalServer, unique_name: str) -> None:
    out = run_example(
        "nats_bulk_publish.py", server.address, server.nats_url, unique_name, "--count", "3000"
    )
    assert "published 3000 orders in" in out and ", 0 failed" in out
    stored = [int(line.split(": ")[1].split()[0]) for line in out.splitlines() if ": " in line]
    assert sum(stored[-3:]) == 3000
