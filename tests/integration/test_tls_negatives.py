"""TLS fails closed: every misconfiguration between client and a real TLS (or
plaintext) server ends in a typed LiftbridgeError within the connect
deadline, and no key or certificate material appears in logs or errors."""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

import liftbridge
from liftbridge.testing import LocalServer
from tests.integration import tls_servers

CONNECT_TIMEOUT = 2.0
SLACK = 5.0
"""Seconds past the deadline a busy machine may take before a failure counts as late."""
EXPIRES_IN = 20.0
"""Seconds the expiring server certificate is valid: enough for the server to start."""
PEM_MARKERS = ("-----BEGIN", "PRIVATE KEY", "CERTIFICATE-----")


def _write(folder: Path, name: str, blob: trustme.Blob) -> Path:
    path = folder / name
    blob.write_to_path(str(path))
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki-negatives")
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("liftbridge-test-client")
    stranger = other.issue_cert("liftbridge-stranger")
    now = datetime.datetime.now(datetime.UTC)
    expiring = ca.issue_cert(
        "127.0.0.1",
        not_before=now - datetime.timedelta(hours=1),
        not_after=now + datetime.timedelta(seconds=EXPIRES_IN),
    )
    return {
        "ca": _write(folder, "ca.pem", ca.cert_pem),
        "other_ca": _write(folder, "other.pem", other.cert_pem),
        "server_cert": _write(folder, "server.pem", server.cert_chain_pems[0]),
        "server_key": _write(folder, "server.key", server.private_key_pem),
        "client_cert": _write(folder, "client.pem", client.cert_chain_pems[0]),
        "client_key": _write(folder, "client.key", client.private_key_pem),
        "stranger_cert": _write(folder, "stranger.pem", stranger.cert_chain_pems[0]),
        "stranger_key": _write(folder, "stranger.key", stranger.private_key_pem),
        "expiring_cert": _write(folder, "expiring.pem", expiring.cert_chain_pems[0]),
        "expiring_key": _write(folder, "expiring.key", expiring.private_key_pem),
    }


@pytest.fixture(scope="module")
def tls_server(pki: dict[str, Path]) -> Iterator[LocalServer]:
    with tls_servers.tls_server(pki) as server:
        yield server


@pytest.fixture(scope="module")
def mtls_server(pki: dict[str, Path]) -> Iterator[LocalServer]:
    with tls_servers.mtls_server(pki) as server:
        yield server


def _refused(
    address: str,
    tls: liftbridge.TLSConfig | None,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> liftbridge.LiftbridgeError:
    """Connects, expecting a typed failure in time with no key material anywhere."""
    caplog.set_level(logging.DEBUG)
    start = time.monotonic()
    with pytest.raises(liftbridge.LiftbridgeError) as caught:
        liftbridge.Client(address, tls=tls, connect_timeout=CONNECT_TIMEOUT, rpc_timeout=2.0)
    took = time.monotonic() - start
    assert took < CONNECT_TIMEOUT + SLACK, f"refused after {took:.1f}s"
    out, err = capfd.readouterr()
    chain = []
    error: BaseException | None = caught.value
    while error is not None:
        chain.append(repr(error))
        error = error.__cause__ or error.__context__
    for text in (caplog.text, out, err, "\n".join(chain)):
        for marker in PEM_MARKERS:
            assert marker not in text
    return caught.value


def test_a_ca_that_did_not_sign_the_server(
    tls_server: LocalServer,
    pki: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    tls = liftbridge.TLSConfig(ca=pki["other_ca"])
    assert isinstance(_refused(tls_server.address, tls, caplog, capfd), liftbridge.UnavailableError)


def test_a_hostname_the_certificate_does_not_name(
    tls_server: LocalServer,
    pki: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    tls = liftbridge.TLSConfig(ca=pki["ca"], server_name="not-this-server.example")
    assert isinstance(_refused(tls_server.address, tls, caplog, capfd), liftbridge.UnavailableError)
    # The same settings with a name the certificate has connect: only the name was wrong.
    good = liftbridge.TLSConfig(ca=pki["ca"], server_name="localhost")
    with liftbridge.Client(tls_server.address, tls=good) as client:
        assert client.fetch_metadata().brokers


def test_an_expired_server_certificate(
    pki: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The harness checks the server with the CA while it starts, so the
    # certificate is valid then and expires EXPIRES_IN seconds after it was made.
    expires = pki["expiring_cert"].stat().st_mtime + EXPIRES_IN
    with LocalServer(
        tls_cert=pki["expiring_cert"], tls_key=pki["expiring_key"], tls_ca=pki["ca"]
    ) as server:
        time.sleep(max(0.0, expires + 1.5 - time.time()))
        tls = liftbridge.TLSConfig(ca=pki["ca"])
        assert isinstance(_refused(server.address, tls, caplog, capfd), liftbridge.UnavailableError)


def test_mtls_without_a_client_certificate(
    mtls_server: LocalServer,
    pki: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    tls = liftbridge.TLSConfig(ca=pki["ca"])
    assert isinstance(
        _refused(mtls_server.address, tls, caplog, capfd), liftbridge.UnavailableError
    )


def test_mtls_with_a_client_certificate_from_another_ca(
    mtls_server: LocalServer,
    pki: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    tls = liftbridge.TLSConfig(ca=pki["ca"], cert=pki["stranger_cert"], key=pki["stranger_key"])
    assert isinstance(
        _refused(mtls_server.address, tls, caplog, capfd), liftbridge.UnavailableError
    )


def test_plaintext_against_tls(
    tls_server: LocalServer,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert isinstance(
        _refused(tls_server.address, None, caplog, capfd), liftbridge.UnavailableError
    )


def test_tls_against_plaintext(
    server: LocalServer,
    pki: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    tls = liftbridge.TLSConfig(ca=pki["ca"], cert=pki["client_cert"], key=pki["client_key"])
    assert isinstance(_refused(server.address, tls, caplog, capfd), liftbridge.UnavailableError)
