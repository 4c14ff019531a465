"""TLS and mutual TLS against a TLS-enabled LocalServer with certificates made here."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

import liftbridge
from liftbridge._transport._channels import Channels
from liftbridge.testing import LocalServer
from liftbridge_api import api_pb2
from tests.conftest import GRPC_SENDER
from tests.integration import tls_servers


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1, and a client certificate."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("liftbridge-test-client")
    paths = {
        "ca": folder / "ca.pem",
        "server_cert": folder / "server.pem",
        "server_key": folder / "server.key",
        "client_cert": folder / "client.pem",
        "client_key": folder / "client.key",
    }
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["server_cert"]))
    server.private_key_pem.write_to_path(str(paths["server_key"]))
    client.cert_chain_pems[0].write_to_path(str(paths["client_cert"]))
    client.private_key_pem.write_to_path(str(paths["client_key"]))
    other = trustme.CA()
    paths["other_ca"] = folder / "other.pem"
    other.cert_pem.write_to_path(str(paths["other_ca"]))
    return paths


@pytest.fixture(scope="module")
def tls_server(pki: dict[str, Path]) -> Iterator[LocalServer]:
    with tls_servers.tls_server(pki) as server:
        yield server


@pytest.fixture(scope="module")
def mtls_server(pki: dict[str, Path]) -> Iterator[LocalServer]:
    with tls_servers.mtls_server(pki) as server:
        yield server


def test_tls_round_trip(tls_server: LocalServer, pki: dict[str, Path], unique_name: str) -> None:
    tls = liftbridge.TLSConfig(ca=pki["ca"])
    with liftbridge.Client(tls_server.address, tls=tls) as client:
        client.create_stream(unique_name)
        ack = client.publish(unique_name, b"secret")
        assert ack is not None and ack.offset == 0
        with client.subscribe(unique_name, start=0, stop=0) as sub:
            assert [m.value for m in sub] == [b"secret"]


def test_a_tls_clients_streams_run_on_the_sdks_own_http2_over_tls(
    tls_server: LocalServer, pki: dict[str, Path], unique_name: str
) -> None:
    """With TLS too, the shared PublishAsync stream, the lanes and
    subscriptions run on the SDK's own HTTP/2 connections (ALPN h2), not
    grpcio's: its sender thread is there, no grpcio stream sender is."""
    tls = liftbridge.TLSConfig(ca=pki["ca"])
    with liftbridge.Client(tls_server.address, tls=tls) as client:
        client.create_stream(unique_name)
        values = [b"%d" % i for i in range(100)] + [b"t" * 300_000]
        futures = [client.publish_async(unique_name, value) for value in values]
        acks = [f.result(timeout=30) for f in futures]
        assert [a.offset for a in acks if a is not None] == list(range(len(values)))
        ack = client.publish(unique_name, b"on a lane")
        assert ack is not None and ack.offset == len(values)
        names = [t.name for t in threading.enumerate()]
        assert names.count("liftbridge-h2-send") >= 2  # the shared stream and the lane
        assert not any(name.endswith(GRPC_SENDER) for name in names)
        with client.subscribe(unique_name, start=len(values) - 1, stop=len(values)) as sub:
            assert [m.value for m in sub] == [values[-1], b"on a lane"]


def test_a_wrong_server_name_fails_the_own_connection_typed(
    tls_server: LocalServer, pki: dict[str, Path], unique_name: str
) -> None:
    """The certificate is checked on the own connections as on grpcio's:
    a server name it does not carry is refused before anything is sent."""
    with liftbridge.Client(tls_server.address, tls=liftbridge.TLSConfig(ca=pki["ca"])) as good:
        good.create_stream(unique_name)
    channels = Channels(liftbridge.TLSConfig(ca=pki["ca"], server_name="not-the-server.example"))
    try:
        with pytest.raises(liftbridge.UnavailableError, match="TLS"):
            channels.open_stream(
                tls_server.address,
                "Subscribe",
                api_pb2.SubscribeRequest(stream=unique_name),
                connect_timeout=5,
            )
    finally:
        channels.close()


def test_tls_ca_as_bytes(tls_server: LocalServer, pki: dict[str, Path]) -> None:
    tls = liftbridge.TLSConfig(ca=pki["ca"].read_bytes())
    with liftbridge.Client(tls_server.address, tls=tls) as client:
        assert client.fetch_metadata().brokers


def test_wrong_ca_is_refused(tls_server: LocalServer, pki: dict[str, Path]) -> None:
    with pytest.raises(liftbridge.UnavailableError):
        liftbridge.Client(
            tls_server.address, tls=liftbridge.TLSConfig(ca=pki["other_ca"]), connect_timeout=2
        )


def test_plaintext_client_is_refused(tls_server: LocalServer) -> None:
    with pytest.raises(liftbridge.UnavailableError):
        liftbridge.Client(tls_server.address, connect_timeout=2)


def test_mutual_tls(mtls_server: LocalServer, pki: dict[str, Path], unique_name: str) -> None:
    tls = liftbridge.TLSConfig(ca=pki["ca"], cert=pki["client_cert"], key=pki["client_key"])
    with liftbridge.Client(mtls_server.address, tls=tls) as client:
        assert client.fetch_metadata().brokers
        client.create_stream(unique_name)
    # The certificate as PEM bytes too; the streams (own HTTP/2 over TLS) present it.
    as_bytes = liftbridge.TLSConfig(
        ca=pki["ca"].read_bytes(),
        cert=pki["client_cert"].read_bytes(),
        key=pki["client_key"].read_bytes(),
    )
    with liftbridge.Client(mtls_server.address, tls=as_bytes) as client:
        assert client.publish(unique_name, b"lane") is not None
        assert client.publish_async(unique_name, b"shared").result(timeout=30) is not None
        with client.subscribe(unique_name, start=0, stop=1) as sub:
            assert [m.value for m in sub] == [b"lane", b"shared"]
    with pytest.raises(liftbridge.UnavailableError):
        liftbridge.Client(
            mtls_server.address, tls=liftbridge.TLSConfig(ca=pki["ca"]), connect_timeout=2
        )


def test_tls_config_errors(pki: dict[str, Path]) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="together"):
        liftbridge.TLSConfig(ca=pki["ca"], cert=pki["client_cert"]).credentials()
    with pytest.raises(liftbridge.InvalidArgumentError, match="cannot read"):
        liftbridge.TLSConfig(ca="/no/such/file.pem").credentials()


def test_command_line_over_mutual_tls(mtls_server: LocalServer, pki: dict[str, Path]) -> None:
    def cli(*tls: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "liftbridge", "-a", mtls_server.address, "--timeout", "3"]
        return subprocess.run(
            [*argv, *tls, "streams", "--internal"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    client_cert = ("--tls-cert", str(pki["client_cert"]), "--tls-key", str(pki["client_key"]))
    done = cli("--tls-ca", str(pki["ca"]), *client_cert)
    assert done.returncode == 0, done.stderr
    assert "__cursors" in done.stdout
    refused = cli("--tls-ca", str(pki["ca"]))  # no client certificate
    # exit status 3: no server could be reached (the handshake is refused)
    assert refused.returncode == 3 and "could not reach" in refused.stderr
    half = cli("--tls-ca", str(pki["ca"]), "--tls-cert", str(pki["client_cert"]))
    assert half.returncode == 2 and "together" in half.stderr  # 2: bad usage
