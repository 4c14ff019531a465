"""The options every query has: ``servers``, TLS and the ``liftbridge.<setting>``
client settings, parsed into a :class:`ClientConfig`; and the small parsers the
read and write options share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from liftbridge import InvalidArgumentError, TLSConfig
from liftbridge._core._validate import SERVER_MAX_MESSAGE

TLS_OPTIONS = ("tls.ca", "tls.cert", "tls.key", "tls.servername")
"""The TLS options' names (lower-case)."""


def lower(options: Mapping[str, str]) -> dict[str, str]:
    """The options with lower-case names (Spark's are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


CLIENT_PREFIX = "liftbridge."
_CLIENT_TIMES = {
    "connectTimeoutMs": "connect_timeout",
    "rpcTimeoutMs": "rpc_timeout",
    "ackWaitMs": "ack_wait",
    "resubscribeWaitMs": "resubscribe_wait",
}
_CLIENT_COUNTS = {"maxInflight": "max_inflight", "maxMessageSize": "max_message_size"}
_CLIENT_SETTINGS = frozenset(n.lower() for n in (*_CLIENT_TIMES, *_CLIENT_COUNTS))
_CLIENT_ALIASES = frozenset({*TLS_OPTIONS, "readreplica"})
"""``liftbridge.<name>`` options that are another option's second name."""
_CLIENT_NAMES = (
    "liftbridge.connectTimeoutMs, liftbridge.rpcTimeoutMs, liftbridge.ackWaitMs, "
    "liftbridge.resubscribeWaitMs, liftbridge.maxInflight, liftbridge.maxMessageSize, "
    "liftbridge.readReplica, liftbridge.tls.ca, liftbridge.tls.cert, liftbridge.tls.key, "
    "liftbridge.tls.serverName"
)


def client_passthrough(options: dict[str, str]) -> dict[str, str]:
    """Folds ``liftbridge.<option>`` aliases into their plain names.

    Raises:
        InvalidArgumentError: an unknown ``liftbridge.`` option, or one given
            under both names.
    """
    for name in [n for n in options if n.startswith(CLIENT_PREFIX)]:
        short = name[len(CLIENT_PREFIX) :]
        if short in _CLIENT_SETTINGS:
            continue
        if short not in _CLIENT_ALIASES:
            raise InvalidArgumentError(
                f"option {name} is not a client option; the liftbridge.* options are "
                f"{_CLIENT_NAMES}"
            )
        if short in options:
            raise InvalidArgumentError(f"options {short} and {name} are one option: give one")
        options[short] = options.pop(name)
    return options


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    """Option ``name`` as true/false (``default`` when absent)."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} must be true or false, got {raw!r}")
    return value == "true"


def int_option(options: Mapping[str, str], name: str, minimum: int) -> int | None:
    """Option ``name`` as an integer >= ``minimum`` (None when absent)."""
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidArgumentError(f"option {name} must be >= {minimum}, got {value}")
    return value


# ----------------------------------------------------------------- clients --


@dataclass(frozen=True)
class ClientConfig:
    """What an executor needs to open a client: picklable, hashable (the key of
    each worker process's client cache) and free of file paths, because the
    PEM files named by the TLS options are read on the driver.

    Attributes:
        servers: seed addresses, ``host:port``.
        tls_ca: PEM of the certificates that sign the servers'.
        tls_cert: PEM of the client certificate chain (mTLS).
        tls_key: PEM of the client key (mTLS).
        tls_server_name: name to check the server certificate against.
        connect_timeout, rpc_timeout, ack_wait, resubscribe_wait, max_inflight,
            max_message_size: the :class:`~liftbridge.Client` settings of the
            same names (``liftbridge.<name>`` options; times in seconds here).
    """

    servers: tuple[str, ...]
    tls_ca: bytes | None = None
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    tls_server_name: str | None = None
    connect_timeout: float = 5.0
    rpc_timeout: float = 10.0
    ack_wait: float = 5.0
    resubscribe_wait: float = 30.0
    max_inflight: int = 1024
    max_message_size: int = SERVER_MAX_MESSAGE

    @property
    def tls(self) -> TLSConfig | None:
        """The SDK's TLS settings, None for plaintext."""
        if (
            self.tls_ca is None
            and self.tls_cert is None
            and self.tls_server_name is None
            and self.tls_key is None
        ):
            return None
        return TLSConfig(
            ca=self.tls_ca, cert=self.tls_cert, key=self.tls_key, server_name=self.tls_server_name
        )

    def __repr__(self) -> str:
        # Never show key material, not even in a log line.
        tls = "tls" if self.tls is not None else "plaintext"
        return f"ClientConfig({','.join(self.servers)}, {tls})"


def _pem(options: Mapping[str, str], name: str) -> bytes | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    if raw.lstrip().startswith("-----BEGIN"):
        return raw.encode()
    try:
        return Path(raw).read_bytes()
    except OSError as e:
        raise InvalidArgumentError(f"option {name}: cannot read {raw!r}: {e.strerror}") from None


def client_config(options: Mapping[str, str]) -> ClientConfig:
    """The ``servers`` and TLS options (keys already lower-case).

    Raises:
        InvalidArgumentError: ``servers`` is missing or malformed, a TLS file
            cannot be read, or only one of ``tls.cert`` / ``tls.key`` is set.
    """
    raw = options.get("servers")
    if raw is None or not raw.strip():
        raise InvalidArgumentError(
            "option servers is required: one or more Liftbridge addresses, "
            "e.g. .option('servers', 'host1:9292,host2:9292')"
        )
    servers = tuple(s.strip() for s in raw.split(","))
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgumentError(f"option servers: {server!r} is not host:port (in {raw!r})")
    cert, key = _pem(options, "tls.cert"), _pem(options, "tls.key")
    if (cert is None) != (key is None):
        raise InvalidArgumentError("options tls.cert and tls.key must be given together (mTLS)")
    server_name = options.get("tls.servername")
    settings: dict[str, float | int] = {}
    for name, field in _CLIENT_TIMES.items():
        ms = int_option(options, CLIENT_PREFIX + name, 1)
        if ms is not None:
            settings[field] = ms / 1000
    for name, field in _CLIENT_COUNTS.items():
        count = int_option(options, CLIENT_PREFIX + name, 1)
        if count is not None:
            settings[field] = count
    return ClientConfig(
        servers=servers,
        tls_ca=_pem(options, "tls.ca"),
        tls_cert=cert,
        tls_key=key,
        tls_server_name=server_name.strip() if server_name else None,
        **settings,  # type: ignore[arg-type]
    )
