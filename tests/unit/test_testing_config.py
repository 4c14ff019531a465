"""The harness's configuration writer: dotted keys in, nested YAML out."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from liftbridge import ArgumentTypeError, InvalidArgumentError
from liftbridge.testing import LocalServer, ServerBinaryNotFoundError
from liftbridge.testing._config import (
    go_duration,
    internal_streams,
    merge_settings,
    node_settings,
    render_nats_conf,
    render_yaml,
)
from liftbridge.testing._process import resolve_binary


def test_dotted_keys_become_nested_sections_in_first_seen_order() -> None:
    text = render_yaml(
        {
            "port": 9292,
            "clustering.raft.bootstrap.seed": True,
            "clustering.server.id": "a",
            "cursors.stream.partitions": 2,
        }
    )

    assert text == (
        "port: 9292\n"
        "clustering:\n"
        "  raft:\n"
        "    bootstrap:\n"
        "      seed: true\n"
        "  server:\n"
        '    id: "a"\n'
        "cursors:\n"
        "  stream:\n"
        "    partitions: 2\n"
    )


def test_lists_are_block_sequences_of_quoted_strings() -> None:
    text = render_yaml({"clustering.raft.bootstrap.peers": ["a", "b", "c"], "nats.servers": []})

    assert text == (
        "clustering:\n"
        "  raft:\n"
        "    bootstrap:\n"
        "      peers:\n"
        '        - "a"\n'
        '        - "b"\n'
        '        - "c"\n'
        "nats:\n"
        "  servers: []\n"
    )


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (-3, "-3"),
        (0.5, "0.5"),
        ("0s", '"0s"'),
        ("true", '"true"'),  # a string stays a string
        ("", '""'),
        ('say "hi"\n', '"say \\"hi\\"\\n"'),
        ("/tmp/a b/c: d", '"/tmp/a b/c: d"'),
        ("é", '"\\u00e9"'),
    ],
)
def test_scalars(value: bool | int | float | str, rendered: str) -> None:
    assert render_yaml({"key": value}) == f"key: {rendered}\n"


def test_quoted_strings_read_back_as_json() -> None:
    tricky = "a'b\"c\\d\te: #f"
    line = render_yaml({"k": tricky})
    assert json.loads(line.removeprefix("k: ")) == tricky


@pytest.mark.parametrize(
    "keys",
    [
        ("nats.embedded", "nats.embedded.config"),
        ("nats.embedded.config", "nats.embedded"),
    ],
)
def test_a_key_cannot_be_a_value_and_a_section(keys: tuple[str, str]) -> None:
    with pytest.raises(InvalidArgumentError, match=r"nats\.embedded"):
        render_yaml({keys[0]: True, keys[1]: "/x.conf"})


@pytest.mark.parametrize("key", ["", "Port", "a..b", ".a", "a.", "a b", "a.1b", "tls-cert"])
def test_malformed_keys_are_refused(key: str) -> None:
    with pytest.raises(InvalidArgumentError, match="config key"):
        render_yaml({key: 1})


@pytest.mark.parametrize("value", [None, {"a": 1}, [1, 2], b"bytes", float("nan")])
def test_unsupported_values_are_refused(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="'k'"):
        render_yaml({"k": value})  # type: ignore[dict-item]


def test_wrong_value_types_are_type_errors() -> None:
    with pytest.raises(ArgumentTypeError):
        render_yaml({"k": object()})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (3, "3s"), (3.0, "3s"), (0.5, "500ms"), (1.25, "1250ms"), (90, "90s")],
)
def test_go_durations(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


@pytest.mark.parametrize("seconds", [-1, float("inf"), float("nan")])
def test_bad_durations(seconds: float) -> None:
    with pytest.raises(InvalidArgumentError):
        go_duration(seconds)


def test_overrides_replace_add_and_remove() -> None:
    base = {"a.b": 1, "a.c": 2}
    merged = merge_settings(base, {"a.b": 5, "a.c": None, "d": "x"})
    assert merged == {"a.b": 5, "d": "x"}
    assert base == {"a.b": 1, "a.c": 2}
    assert merge_settings(base, None) == base


def test_node_settings_turn_on_what_tests_need() -> None:
    settings = node_settings(
        server_id="b",
        namespace="ns",
        host="127.0.0.1",
        port=1234,
        data_dir="/d",
        nats_servers=["nats://127.0.0.1:4222"],
        log_level="info",
        consumer_timeout=3.0,
        coordinator_timeout=0.5,
    )
    assert settings["cursors.stream.partitions"] == 2
    assert settings["cursors.stream.auto.pause.time"] == "0s"
    assert settings["activity.stream.enabled"] is True
    assert settings["groups.consumer.timeout"] == "3s"
    assert settings["groups.coordinator.timeout"] == "500ms"
    assert not any(key == "nats.embedded" for key in settings)
    assert internal_streams(settings) == ("__cursors", "__activity")
    assert internal_streams({"cursors.stream.partitions": 0}) == ()
    render_yaml(settings)


def test_nats_conf_binds_loopback() -> None:
    assert render_nats_conf(host="127.0.0.1", port=4333) == 'host: "127.0.0.1"\nport: 4333\n'


def test_local_server_checks_its_arguments_before_starting(tmp_path: Path) -> None:
    fake = tmp_path / "liftbridge"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    pem = tmp_path / "x.pem"
    pem.write_text("not really")

    with pytest.raises(InvalidArgumentError, match="log_level"):
        LocalServer(binary=fake, log_level="loud")
    with pytest.raises(InvalidArgumentError, match="tls_key"):
        LocalServer(binary=fake, tls_cert=pem)
    with pytest.raises(InvalidArgumentError, match="tls_ca"):
        LocalServer(binary=fake, tls_cert=pem, tls_key=pem)
    with pytest.raises(InvalidArgumentError, match="tls_client_cert"):
        LocalServer(binary=fake, tls_cert=pem, tls_key=pem, tls_ca=pem, tls_client_ca=pem)
    with pytest.raises(InvalidArgumentError, match="tls_key="):
        LocalServer(binary=fake, tls_cert=pem, tls_key=tmp_path / "missing", tls_ca=pem)
    with pytest.raises(InvalidArgumentError, match=r"nats\.embedded"):
        LocalServer(binary=fake, config_overrides={"nats.embedded": False})
    with pytest.raises(InvalidArgumentError, match="startup_timeout"):
        LocalServer(binary=fake, startup_timeout=0)


def test_a_python_script_is_never_taken_for_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "scripts" / "liftbridge"  # an old SDK's console script
    script.parent.mkdir()
    script.write_text("#!/usr/bin/python3\nfrom liftbridge.cli import main\nmain()\n")
    script.chmod(0o755)
    server = tmp_path / "bin" / "liftbridge"
    server.parent.mkdir()
    server.write_bytes(b"\x7fELF\x02\x01\x01")
    server.chmod(0o755)
    monkeypatch.delenv("LIFTBRIDGE_SERVER_BIN", raising=False)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{server.parent}")
    assert resolve_binary(None, env_var="LIFTBRIDGE_SERVER_BIN", name="liftbridge") == str(server)
    monkeypatch.setenv("PATH", str(script.parent))
    with pytest.raises(ServerBinaryNotFoundError, match=r"scripts/liftbridge on PATH is a Python"):
        LocalServer()
    monkeypatch.setenv("LIFTBRIDGE_SERVER_BIN", str(script))
    with pytest.raises(ServerBinaryNotFoundError, match="is a Python script"):
        LocalServer()


def test_fixed_ports_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="port must be a TCP port"):
        LocalServer(binary=_ANY_EXECUTABLE, port=70000)
    with pytest.raises(ArgumentTypeError, match="nats_port must be an int"):
        LocalServer(binary=_ANY_EXECUTABLE, nats_port="4222")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="must differ"):
        LocalServer(binary=_ANY_EXECUTABLE, port=4222, nats_port=4222)


_ANY_EXECUTABLE = "/bin/sh"
