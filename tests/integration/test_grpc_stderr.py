"""gRPC's C core writes nothing to stderr past Python's ``logging``: in normal
use and in failures (a dead server, a CA that did not sign the server, TLS
against plaintext and plaintext against TLS, an ``http://`` address, the server
killed under a subscription). Each scenario runs in a child process whose
``logging`` goes to stdout, so whatever reaches its stderr came from elsewhere.
A user's own ``GRPC_VERBOSITY`` stands (and shows the lines the SDK keeps away)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from liftbridge.testing import LocalServer
from tests.integration import tls_servers

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import logging, os, socket, sys
logging.basicConfig(stream=sys.stdout, level=logging.WARNING)
import liftbridge
from liftbridge.testing import LocalServer

plain, tls_address, ca, other_ca, only_tls = sys.argv[1:6]

def refused(what, call):
    try:
        call()
    except liftbridge.LiftbridgeError as e:
        print("refused", what, type(e).__name__, flush=True)
    else:
        print("ACCEPTED", what, flush=True)

def tls_client(address, ca_file):
    return lambda: liftbridge.Client(
        address, tls=liftbridge.TLSConfig(ca=ca_file), connect_timeout=1.5, rpc_timeout=1.0
    )

refused("other CA", tls_client(tls_address, other_ca))
if only_tls == "1":
    sys.exit(0)
refused("TLS against plaintext", tls_client(plain, ca))
refused("plaintext against TLS", lambda: liftbridge.Client(tls_address, connect_timeout=1.5))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{s.getsockname()[1]}"
refused("dead server", lambda: liftbridge.Client(dead, connect_timeout=1.5))
refused("http address", lambda: liftbridge.Client("http://" + plain))

with liftbridge.Client(plain) as client:  # normal use
    name = f"stderr-{os.getpid()}"
    client.create_stream(name, partitions=2)
    for i in range(20):
        client.publish(name, b"v", partition=i % 2)
    [client.publish_async(name, b"a") for _ in range(100)]
    client.flush(10)
    assert len(client.read_stream(name)) == 120
    client.set_cursor("c", name, 0, 3)
    assert client.fetch_cursor("c", name, 0) == 3
    with client.pull(name, start=liftbridge.StartPosition.EARLIEST) as consumer:
        assert consumer.fetch(10, timeout=5)
    client.delete_stream(name)
print("normal use done", flush=True)

server = LocalServer().start()  # killed under a subscription and a publisher
client = liftbridge.Client(server.addresses, resubscribe_wait=1.0, rpc_timeout=1.0)
client.create_stream("k")
client.publish("k", b"first")
sub = client.subscribe("k", start=liftbridge.StartPosition.EARLIEST)
assert next(iter(sub)).value == b"first"
server.kill()
refused("subscription of a killed server", lambda: [m for m in sub])
refused("publish to a killed server", lambda: client.publish("k", b"x", timeout=2))
client.close()
server.stop()
print("GRPC_VERBOSITY after import:", os.environ.get("GRPC_VERBOSITY"), flush=True)
"""


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, dict[str, Path]]]:
    """A TLS server and its files: ``ca`` signed it, ``other_ca`` did not."""
    folder = tmp_path_factory.mktemp("pki-stderr")
    ca, other = trustme.CA(), trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    files = {
        "ca": ca.cert_pem,
        "other_ca": other.cert_pem,
        "server_cert": issued.cert_chain_pems[0],
        "server_key": issued.private_key_pem,
    }
    for name, blob in files.items():
        blob.write_to_path(str(folder / name))
    pki = {name: folder / name for name in files}
    with tls_servers.tls_server(pki) as server:
        yield server, pki


def _child(
    server: LocalServer,
    tls: tuple[LocalServer, dict[str, Path]],
    *,
    only_tls: bool = False,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    tls_server, pki = tls
    environ = {k: v for k, v in os.environ.items() if k not in ("GRPC_VERBOSITY", "GRPC_TRACE")}
    args = [server.address, tls_server.address, str(pki["ca"]), str(pki["other_ca"])]
    return subprocess.run(
        [sys.executable, "-c", CHILD, *args, "1" if only_tls else "0"],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_nothing_from_grpc_reaches_stderr(
    server: LocalServer, tls: tuple[LocalServer, dict[str, Path]]
) -> None:
    done = _child(server, tls)
    assert done.returncode == 0, done.stdout + done.stderr
    for what in (
        "other CA",
        "TLS against plaintext",
        "plaintext against TLS",
        "dead server",
        "http address",
        "subscription of a killed server",
        "publish to a killed server",
    ):
        assert f"refused {what} " in done.stdout, done.stdout
    assert "ACCEPTED" not in done.stdout and "normal use done" in done.stdout
    assert "gave up" in done.stdout  # the subscription's WARNING went through logging
    assert "GRPC_VERBOSITY after import: None" in done.stdout  # the environment put back
    assert done.stderr == ""


def test_a_users_grpc_verbosity_stands(
    server: LocalServer, tls: tuple[LocalServer, dict[str, Path]]
) -> None:
    done = _child(server, tls, only_tls=True, GRPC_VERBOSITY="INFO")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "refused other CA" in done.stdout
    assert "Handshake failed" in done.stderr  # what the SDK's default keeps off stderr
