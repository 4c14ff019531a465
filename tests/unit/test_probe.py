"""liftbridge._transport._probe: a probe answers with the status name a call
ended with and never raises for what the broker did (an in-process gRPC
server on loopback with no service, a closed port, a closed probe)."""

from __future__ import annotations

import socket
from concurrent import futures

import grpc

from liftbridge._transport._probe import CLOSED, HEALTH_CHECK, open_probe


def test_a_server_without_the_method_answers_unimplemented() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with open_probe(f"127.0.0.1:{port}") as probe:
            reply = probe.call(HEALTH_CHECK, b"", 5.0)
        assert reply.status == "UNIMPLEMENTED" and not reply.ok and reply.body == b""
        assert reply.describe().startswith("UNIMPLEMENTED")
    finally:
        server.stop(None).wait(5)


def test_a_closed_port_is_unavailable_and_a_closed_probe_says_closed() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"  # bound, never listening
        probe = open_probe(address)
        assert probe.call(HEALTH_CHECK, b"", 5.0).status == "UNAVAILABLE"
        probe.close()
        assert probe.call(HEALTH_CHECK, b"", 5.0).status == CLOSED
