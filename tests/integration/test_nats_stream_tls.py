"""NatsStreamPublisher over TLS with credentials, against a real nats-server.

The nats-server started here requires TLS and a user and password; the
Liftbridge server connects to it with TLS too (``nats.tls.*``) and a user of
its own. The publisher connects with TLS, verifying the server against the CA
made here.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

import liftbridge
from liftbridge import NatsStreamPublisher, UnavailableError
from liftbridge.testing import LocalServer
from tests.integration.nats_server import DEADLINE, nats_server


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("secure-nats")


@pytest.fixture(scope="module")
def secure_nats(folder: Path, ca: trustme.CA) -> Iterator[int]:
    """A nats-server requiring TLS, with two users; yields its port."""
    certificate = ca.issue_cert("127.0.0.1")
    certificate.cert_chain_pems[0].write_to_path(str(folder / "cert.pem"))
    certificate.private_key_pem.write_to_path(str(folder / "key.pem"))

    def config(port: int) -> str:
        return (
            f"host: 127.0.0.1\n"
            f"port: {port}\n"
            f'tls {{ cert_file: "{folder / "cert.pem"}", key_file: "{folder / "key.pem"}" }}\n'
            "authorization { users = [\n"
            "  { user: liftbridge, password: server-secret }\n"
            "  { user: python, password: client-secret }\n"
            "] }\n"
        )

    with nats_server(folder, config) as port:
        yield port


@pytest.fixture(scope="module")
def secure_server(folder: Path, ca: trustme.CA, secure_nats: int) -> Iterator[LocalServer]:
    """A Liftbridge server using the secure nats-server instead of an embedded one."""
    identity = ca.issue_cert("liftbridge-server")
    identity.cert_chain_pems[0].write_to_path(str(folder / "liftbridge.pem"))
    identity.private_key_pem.write_to_path(str(folder / "liftbridge.key"))
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    overrides: dict[str, object] = {
        "nats.embedded.config": None,
        "nats.servers": [f"tls://liftbridge:server-secret@127.0.0.1:{secure_nats}"],
        "nats.tls.cert": str(folder / "liftbridge.pem"),
        "nats.tls.key": str(folder / "liftbridge.key"),
        "nats.tls.ca": str(folder / "ca.pem"),
    }
    with LocalServer(config_overrides=overrides) as server:  # type: ignore[arg-type]
        yield server


@pytest.fixture
def trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def test_publishes_over_tls_with_a_password(
    secure_server: LocalServer, secure_nats: int, trusting: ssl.SSLContext, unique_name: str
) -> None:
    with liftbridge.Client(secure_server.addresses) as client:
        client.create_stream(unique_name)
        url = f"tls://python:client-secret@127.0.0.1:{secure_nats}"
        with NatsStreamPublisher(client, url, tls=trusting) as publisher:
            assert "client-secret" not in repr(publisher)
            acks = [publisher.publish_async(unique_name, b"%d" % i) for i in range(100)]
            assert [f.result(DEADLINE).offset for f in acks] == list(range(100))  # type: ignore[union-attr]
        assert client.fetch_partition_metadata(unique_name).newest_offset == 99


def test_a_wrong_password_is_unavailable_and_says_why(
    secure_server: LocalServer, secure_nats: int, trusting: ssl.SSLContext
) -> None:
    with liftbridge.Client(secure_server.addresses) as client:
        url = f"tls://python:wrong@127.0.0.1:{secure_nats}"
        with pytest.raises(UnavailableError, match="Authorization Violation"):
            NatsStreamPublisher(client, url, tls=trusting, connect_timeout=1.0)


def test_an_untrusted_certificate_is_unavailable(
    secure_server: LocalServer, secure_nats: int
) -> None:
    with liftbridge.Client(secure_server.addresses) as client:
        url = f"tls://python:client-secret@127.0.0.1:{secure_nats}"
        untrusting = ssl.create_default_context()  # the system CAs only
        with pytest.raises(UnavailableError, match="cannot connect"):
            NatsStreamPublisher(client, url, tls=untrusting, connect_timeout=0.5)
