"""liftbridge.testing against real servers: LocalServer, LocalCluster, the
container, and the fixtures built on them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import grpc
import pytest
import trustme

from liftbridge import LiftbridgeError
from liftbridge.testing import (
    DockerUnavailableError,
    LiftbridgeContainer,
    LocalCluster,
    LocalServer,
    ServerBinaryNotFoundError,
    ServerStartError,
    docker_available,
)
from liftbridge.testing._process import resolve_binary
from liftbridge_api import api_pb2, api_pb2_grpc

RPC_TIMEOUT = 5.0


def fetch_metadata(
    address: str, credentials: grpc.ChannelCredentials | None = None
) -> api_pb2.FetchMetadataResponse:
    if credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        channel = grpc.secure_channel(address, credentials)
    with channel:
        return api_pb2_grpc.APIStub(channel).FetchMetadata(
            api_pb2.FetchMetadataRequest(), timeout=RPC_TIMEOUT
        )


def fetch_metadata_during_outage(address: str) -> api_pb2.FetchMetadataResponse:
    """With a node down, a server whose broker cache expired waits for that node
    until the deadline and fails the call, but caches the answers it got: the
    second call is served from that cache."""
    try:
        return fetch_metadata(address)
    except grpc.RpcError as err:
        if not isinstance(err, grpc.Call) or err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
        return fetch_metadata(address)


def brokers(response: api_pb2.FetchMetadataResponse) -> dict[str, str]:
    return {broker.id: f"{broker.host}:{broker.port}" for broker in response.brokers}


def stream(response: api_pb2.FetchMetadataResponse, name: str) -> api_pb2.StreamMetadata:
    for metadata in response.streamMetadata:
        if metadata.name == name:
            return metadata
    raise AssertionError(f"no stream {name!r} in {[m.name for m in response.streamMetadata]}")


def gone(pid: int | None) -> bool:
    assert pid is not None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# ------------------------------------------------------------ LocalServer --


def test_session_server_lists_itself_and_internal_streams(
    server: LocalServer, server_address: str
) -> None:
    assert server_address == server.address
    assert re.fullmatch(r"127\.0\.0\.1:\d+", server_address)
    assert server.addresses == [server_address]
    assert server.nats_url.startswith("nats://127.0.0.1:")

    response = fetch_metadata(server_address)

    assert brokers(response) == {server.server_id: server_address}
    cursors = stream(response, "__cursors")
    assert sorted(cursors.partitions) == [0, 1]
    assert {p.leader for p in cursors.partitions.values()} == {server.server_id}
    activity = stream(response, "__activity")
    assert {p.leader for p in activity.partitions.values()} == {server.server_id}


def test_local_server_restart_kill_and_stop() -> None:
    server = LocalServer(consumer_timeout=2.5)
    with server:
        first_pid = server.pid
        address = server.address
        directory = server.data_dir.parent
        assert server.running
        assert 'timeout: "2500ms"' in server.config_path.read_text()
        assert "nats.embedded:" not in server.config_path.read_text()
        assert "became metadata leader" in server.log_tail(100)

        server.kill()
        assert not server.running
        assert gone(first_pid)

        server.restart()
        assert server.running
        assert server.pid != first_pid
        assert server.address == address
        assert brokers(fetch_metadata(address)) == {"a": address}
        last_pid = server.pid

    assert gone(last_pid)
    assert not directory.exists()
    assert not server.running
    server.stop()  # idempotent


def test_server_that_fails_to_start_quotes_its_log() -> None:
    server = LocalServer(config_overrides={"no.such.setting": 1})

    with pytest.raises(ServerStartError) as caught:
        server.start()

    assert "Unknown configuration setting" in str(caught.value)
    assert "no.such.setting" in caught.value.log_tail
    assert not server.running
    assert server.pid is None


# What Liftbridge v1.9.0 writes when its promotion to metadata leader times out
# in a one-node cluster on a busy machine (a `make test` run under load).
PROMOTION_CRASH = (
    'level=error msg="Error on metadata leadership acquired: rpc error: code = Internal '
    'desc = Failed to replicate partition: raft operation timed out"\n'
    'level=warning msg="Stepping down as metadata leader"\n'
    "panic: error on metadata leadership step down: cannot find peer\n"
)


def crashing_server(tmp_path: Path, crashes: int, output: str) -> tuple[Path, Path]:
    """A stand-in for the server executable whose first ``crashes`` starts
    write ``output`` and exit with status 2; later starts run the real
    server. Returns it and the file that gets a line per start."""
    real = resolve_binary(None, env_var="LIFTBRIDGE_SERVER_BIN", name="liftbridge")
    starts, said = tmp_path / "starts", tmp_path / "output"
    said.write_text(output)
    script = tmp_path / "liftbridge"
    script.write_text(
        "#!/bin/sh\n"
        f"echo start >> '{starts}'\n"
        f"if [ \"$(wc -l < '{starts}')\" -le {crashes} ]; then cat '{said}'; exit 2; fi\n"
        f"exec '{real}' \"$@\"\n"
    )
    script.chmod(0o755)
    return script, starts


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_a_server_whose_promotion_timed_out_is_started_again(tmp_path: Path) -> None:
    binary, starts = crashing_server(tmp_path, 2, PROMOTION_CRASH)
    with LocalServer(binary=binary) as server:
        assert count_lines(starts) == 3
        assert brokers(fetch_metadata(server.address)) == {"a": server.address}
        assert server.log_path.read_text().count("raft operation timed out") == 2


def test_a_server_whose_promotion_keeps_timing_out_fails_after_three_starts(
    tmp_path: Path,
) -> None:
    binary, starts = crashing_server(tmp_path, 3, PROMOTION_CRASH)
    server = LocalServer(binary=binary)
    with pytest.raises(ServerStartError, match="promotion to metadata leader timed out") as caught:
        server.start()
    assert count_lines(starts) == 3
    assert "cannot find peer" in caught.value.log_tail
    assert not server.running


def test_a_server_that_exits_for_another_reason_is_not_started_again(tmp_path: Path) -> None:
    binary, starts = crashing_server(tmp_path, 1, 'level=fatal msg="Failed to start: disk"\n')
    with pytest.raises(ServerStartError, match="exited with status 2"):
        LocalServer(binary=binary).start()
    assert count_lines(starts) == 1


def test_a_one_node_cluster_whose_promotion_timed_out_is_started_again(tmp_path: Path) -> None:
    binary, starts = crashing_server(tmp_path, 1, PROMOTION_CRASH)
    with LocalCluster(1, binary=binary) as cluster:
        assert count_lines(starts) == 2
        [address] = cluster.addresses
        assert brokers(fetch_metadata(address)) == {"a": address}


# What a Liftbridge v1.9.0 cluster node writes when a peer's Raft vote request
# comes between the start of its Raft node and its bootstrap (seen starting a
# LocalCluster(3) under a loaded suite run).
BOOTSTRAP_CRASH = (
    'level=info msg="Starting Liftbridge server on 127.0.0.1:1..."\n'
    'level=info msg="Shutting down..."\n'
    "panic: failed to start Raft node: bootstrap only works on new clusters\n"
)


def test_a_cluster_whose_node_lost_the_bootstrap_race_is_started_again(tmp_path: Path) -> None:
    # Node c's first start crashes so (the nodes start at once: c alone is scripted).
    real = resolve_binary(None, env_var="LIFTBRIDGE_SERVER_BIN", name="liftbridge")
    starts, said = tmp_path / "starts", tmp_path / "output"
    said.write_text(BOOTSTRAP_CRASH)
    binary = tmp_path / "liftbridge"
    binary.write_text(
        "#!/bin/sh\n"
        f"echo \"$2\" >> '{starts}'\n"
        f'if [ "$(grep -c /c/ \'{starts}\')" -le 1 ] && [ "${{2#*/c/}}" != "$2" ]; then '
        f"cat '{said}'; exit 2; fi\n"
        f"exec '{real}' \"$@\"\n"
    )
    binary.chmod(0o755)
    with LocalCluster(3, binary=binary) as cluster:
        assert count_lines(starts) == 6  # three nodes, twice
        assert set(brokers(fetch_metadata(cluster.addresses[0]))) == {"a", "b", "c"}


def test_missing_server_binary_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LIFTBRIDGE_SERVER_BIN", raising=False)
    monkeypatch.delenv("NATS_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(ServerBinaryNotFoundError) as caught:
        LocalServer()
    message = str(caught.value)
    assert "LIFTBRIDGE_SERVER_BIN" in message
    assert "make server" in message
    # A pip user without Go: a release binary or the official Docker image.
    assert "liftbridge/releases" in message
    assert "LiftbridgeContainer" in message
    assert "liftbridge/standalone-dev" in message
    assert isinstance(caught.value, LiftbridgeError)
    assert isinstance(caught.value, FileNotFoundError)

    with pytest.raises(ServerBinaryNotFoundError, match="binary="):
        LocalServer(binary=tmp_path / "liftbridge")

    monkeypatch.setenv("LIFTBRIDGE_SERVER_BIN", str(tmp_path / "nowhere"))
    with pytest.raises(ServerBinaryNotFoundError, match="LIFTBRIDGE_SERVER_BIN="):
        LocalServer()


def test_missing_nats_binary_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NATS_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(ServerBinaryNotFoundError, match="NATS_SERVER_BIN"):
        LocalCluster(3)


# -------------------------------------------------------------------- TLS --


def issue(ca: trustme.CA, directory: Path, name: str, *identities: str) -> tuple[Path, Path]:
    cert = ca.issue_cert(*identities)
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    return cert_path, key_path


def test_tls_server_accepts_tls_and_rejects_plaintext(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    cert, key = issue(ca, tmp_path, "server", "127.0.0.1", "localhost")

    with LocalServer(tls_cert=cert, tls_key=key, tls_ca=ca_path) as server:
        assert 'cert: "' in server.config_path.read_text()
        trusted = grpc.ssl_channel_credentials(root_certificates=ca_path.read_bytes())
        assert brokers(fetch_metadata(server.address, trusted)) == {"a": server.address}

        with pytest.raises(grpc.RpcError) as plaintext:
            fetch_metadata(server.address)
        assert isinstance(plaintext.value, grpc.Call)
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE

        stranger = trustme.CA().cert_pem.bytes()
        with pytest.raises(grpc.RpcError):
            fetch_metadata(server.address, grpc.ssl_channel_credentials(stranger))


def test_mutual_tls_server_requires_a_client_certificate(tmp_path: Path) -> None:
    ca, client_ca = trustme.CA(), trustme.CA()
    ca_path, client_ca_path = tmp_path / "ca.pem", tmp_path / "client-ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    client_ca.cert_pem.write_to_path(str(client_ca_path))
    cert, key = issue(ca, tmp_path, "server", "127.0.0.1")
    client_cert, client_key = issue(client_ca, tmp_path, "client", "test-client@example.org")

    with LocalServer(
        tls_cert=cert,
        tls_key=key,
        tls_ca=ca_path,
        tls_client_ca=client_ca_path,
        tls_client_cert=client_cert,
        tls_client_key=client_key,
    ) as server:
        assert "enabled: true" in server.config_path.read_text()
        identified = grpc.ssl_channel_credentials(
            root_certificates=ca_path.read_bytes(),
            private_key=client_key.read_bytes(),
            certificate_chain=client_cert.read_bytes(),
        )
        assert brokers(fetch_metadata(server.address, identified)) == {"a": server.address}

        anonymous = grpc.ssl_channel_credentials(root_certificates=ca_path.read_bytes())
        with pytest.raises(grpc.RpcError):
            fetch_metadata(server.address, anonymous)


# ------------------------------------------------------------ LocalCluster --


@pytest.mark.cluster
def test_cluster_survives_a_kill_and_takes_the_node_back() -> None:
    with LocalCluster(3) as cluster:
        nodes = cluster.nodes
        assert [node.server_id for node in nodes] == ["a", "b", "c"]
        everyone = {node.server_id: node.address for node in nodes}
        assert cluster.addresses == list(everyone.values())
        for address in cluster.addresses:
            response = fetch_metadata(address)
            assert brokers(response) == everyone
            assert stream(response, "__cursors").partitions
            assert stream(response, "__activity").partitions

        victim = cluster.node("b")
        assert cluster.node_for_address(victim.address) is victim
        victim_pid = victim.pid
        cluster.kill(victim)
        assert not victim.running
        assert gone(victim_pid)
        for survivor in (cluster.node("a"), cluster.node("c")):
            listed = brokers(fetch_metadata_during_outage(survivor.address))
            assert {"a", "c"} <= listed.keys()

        cluster.wait_ready(timeout=30)  # internal streams led by running nodes again
        cluster.restart("b")
        assert victim.running
        assert victim.pid != victim_pid
        assert brokers(fetch_metadata(victim.address)) == everyone

        cluster.stop("c")
        assert not cluster.node("c").running
        cluster.restart("c")

        pids = [node.pid for node in cluster.nodes] + [cluster.nats_pid]
        directory = victim.data_dir.parent.parent

    assert all(gone(pid) for pid in pids)
    assert not directory.exists()


def test_cluster_arguments_are_checked(tmp_path: Path) -> None:
    with pytest.raises(LiftbridgeError, match="size"):
        LocalCluster(0)
    with pytest.raises(LiftbridgeError, match="size"):
        LocalCluster(27)
    with pytest.raises(LiftbridgeError, match="not started"):
        _ = LocalCluster(3).nodes
    with pytest.raises(LiftbridgeError, match="data_dirs names 'd'"):
        LocalCluster(3, data_dirs={"d": tmp_path})
    with pytest.raises(LiftbridgeError, match="not a directory"):
        LocalCluster(3, data_dirs={"a": tmp_path / "missing"})
    with pytest.raises(TypeError, match="data_dirs must be a mapping"):
        LocalCluster(3, data_dirs=[("a", tmp_path)])  # type: ignore[arg-type]


def test_a_node_keeps_its_data_in_the_directory_given(tmp_path: Path) -> None:
    with LocalCluster(3, data_dirs={"c": tmp_path}) as cluster:
        assert cluster.node("c").data_dir == tmp_path
        assert cluster.node("b").data_dir != tmp_path
        assert any(tmp_path.iterdir()), "node c wrote nothing where it was told to"
    assert tmp_path.is_dir()  # the caller's: the cluster leaves it


# ------------------------------------------------------------- container --


def test_container_serves_metadata() -> None:
    container = LiftbridgeContainer()
    try:
        container.start()
    except DockerUnavailableError as err:  # it pings the engine before anything else
        pytest.skip(f"needs a Docker engine: {err}")
    try:
        response = fetch_metadata(container.address)
        assert brokers(response) == {container.server_id: container.address}
        assert stream(response, "__cursors").partitions
    finally:
        container.stop()


def test_container_without_docker_fails_clearly() -> None:
    if docker_available():
        pytest.skip("a Docker engine answers here")
    with pytest.raises(DockerUnavailableError, match=r"Docker engine|testcontainers"):
        LiftbridgeContainer().start()


# --------------------------------------------------------------- fixtures --


def test_unique_name_is_a_fresh_stream_name(unique_name: str) -> None:
    assert re.fullmatch(r"test_unique_name_is_a_fresh_stream_name-[0-9a-f]{8}", unique_name)
