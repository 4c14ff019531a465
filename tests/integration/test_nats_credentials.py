"""The SDK's NATS connection with a ``.creds`` file, against a real nats-server
in operator mode (JWTs made here with nkeys: operator, account, user)."""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nkeys  # the dev and nats extras install it
import pytest

from liftbridge import UnavailableError
from liftbridge._transport._nats_socket import NatsSocket
from tests.integration.nats_server import DEADLINE, nats_server


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _key(prefix: int) -> Any:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(secrets.token_bytes(32), prefix)))


def _jwt(issuer: Any, subject: Any, name: str, nats: dict[str, Any]) -> str:
    claims = {
        "jti": _b64(secrets.token_bytes(32)),
        "iat": int(time.time()),
        "iss": issuer.public_key.decode(),
        "sub": subject.public_key.decode(),
        "name": name,
        "nats": {**nats, "version": 2},
    }
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{header}.{body}.{_b64(issuer.sign(f'{header}.{body}'.encode()))}"


def _user(account: Any, folder: Path, name: str) -> Path:
    user = _key(nkeys.PREFIX_BYTE_USER)
    token = _jwt(
        account,
        user,
        name,
        {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1},
    )
    path = folder / f"{name}.creds"
    path.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{token}\n"
        "------END NATS USER JWT------\n\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed.decode()}\n"
        "------END USER NKEY SEED------\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def operator_mode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path, Path]]:
    """A nats-server trusting one operator and one account; yields its port,
    a good ``.creds`` file and one signed by an account it does not know."""
    folder = tmp_path_factory.mktemp("creds-nats")
    operator = _key(nkeys.PREFIX_BYTE_OPERATOR)
    account, stranger = _key(nkeys.PREFIX_BYTE_ACCOUNT), _key(nkeys.PREFIX_BYTE_ACCOUNT)
    limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1}
    limits.update({"conn": -1, "leaf": -1})
    account_jwt = _jwt(
        operator, account, "app", {"type": "account", "limits": {**limits, "wildcards": True}}
    )

    def config(port: int) -> str:
        return (
            f"host: 127.0.0.1\nport: {port}\n"
            f"operator: {_jwt(operator, operator, 'op', {'type': 'operator'})}\n"
            "resolver: MEMORY\n"
            f"resolver_preload: {{ {account.public_key.decode()}: {account_jwt} }}\n"
        )

    with nats_server(folder, config) as port:
        yield port, _user(account, folder, "good"), _user(stranger, folder, "stranger")


def test_a_creds_file_signs_the_nonce_and_messages_flow(
    operator_mode: tuple[int, Path, Path],
) -> None:
    port, good, _ = operator_mode
    received: list[bytes] = []
    arrived = threading.Event()

    def deliver(item: object) -> None:
        if isinstance(item, list):
            received.extend(item)
            arrived.set()

    connection = NatsSocket("creds", "_INBOX.creds", deliver, lambda: None)
    connection.connect(f"nats://127.0.0.1:{port}", connect_timeout=DEADLINE, credentials=str(good))
    try:
        connection.send("_INBOX.creds", b"signed", None)  # to its own inbox
        assert arrived.wait(DEADLINE)
        assert received == [b"signed"]
    finally:
        connection.close()


def test_a_creds_file_of_an_unknown_account_is_unavailable(
    operator_mode: tuple[int, Path, Path],
) -> None:
    port, _, stranger = operator_mode
    connection = NatsSocket("creds", "_INBOX.creds", lambda item: None, lambda: None)
    with pytest.raises(UnavailableError, match="Authorization Violation"):
        connection.connect(
            f"nats://127.0.0.1:{port}", connect_timeout=DEADLINE, credentials=str(stranger)
        )
