"""The client's TLS settings, and what each transport builds from them: gRPC
credentials for grpcio channels, an ``ssl.SSLContext`` for the SDK's own
HTTP/2 connections."""

from __future__ import annotations

import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import grpc

from liftbridge._errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["TLSConfig"]


def _read(value: bytes | str | Path | None, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (str, Path)):
        try:
            return Path(value).read_bytes()
        except OSError as e:
            raise InvalidArgumentError(f"TLS {what}: cannot read {str(value)!r}: {e}") from e
    raise ArgumentTypeError(
        f"TLS {what} must be PEM bytes or a file path, got {type(value).__name__}"
    )


def _source(value: bytes | str | Path | None) -> str:
    return f"{len(value)} bytes" if isinstance(value, bytes) else repr(str(value))


@dataclass(frozen=True)
class TLSConfig:
    """TLS settings for every connection the client makes. Verification is always on.

    Each field takes PEM bytes or a path to a PEM file.

    Attributes:
        ca: certificates that sign the server's; ``None`` uses the system roots.
        cert: client certificate chain, for servers that require client
            authentication (mTLS); needs ``key``.
        key: the client certificate's private key; needs ``cert``.
        server_name: check the server certificate against this name instead
            of the host dialed (for example when dialing an IP address).
    """

    ca: bytes | str | Path | None = None
    cert: bytes | str | Path | None = None
    key: bytes | str | Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        """Checks the settings when they are made, naming the field: a
        garbage or missing file fails here, not at the first connection.

        Raises:
            ArgumentTypeError: a field of the wrong type.
            InvalidArgumentError: a file cannot be read or is not PEM, or
                only one of cert/key is set.
        """
        if self.server_name is not None and not isinstance(self.server_name, str):
            raise ArgumentTypeError(
                f"TLS server_name must be a str or None, got {type(self.server_name).__name__}"
            )
        self.ssl_context()

    def credentials(self) -> grpc.ChannelCredentials:
        """Builds the gRPC credentials, reading any files now.

        Raises:
            InvalidArgumentError: a file cannot be read, or only one of cert/key is set.
        """
        cert, key = _read(self.cert, "cert"), _read(self.key, "key")
        if (cert is None) != (key is None):
            raise InvalidArgumentError("TLS cert and key must be given together (mTLS)")
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "ca"), private_key=key, certificate_chain=cert
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The same settings for the SDK's own HTTP/2 connections: verification
        on, ALPN h2, TLS 1.2 at least, reading any files now.

        Raises:
            InvalidArgumentError: a file cannot be read or is not PEM, or only
                one of cert/key is set.
        """
        ca, cert, key = _read(self.ca, "ca"), _read(self.cert, "cert"), _read(self.key, "key")
        if (cert is None) != (key is None):
            raise InvalidArgumentError("TLS cert and key must be given together (mTLS)")
        try:
            context = ssl.create_default_context(cadata=ca.decode() if ca is not None else None)
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
            raise InvalidArgumentError(
                f"TLS ca: not PEM certificates ({_source(self.ca)}): {e}"
            ) from e
        try:
            if cert is not None and key is not None:
                # ssl loads a chain from files only: written for the load,
                # readable by this user alone, removed at once.
                with tempfile.TemporaryDirectory(prefix="liftbridge-tls-") as folder:
                    chain, secret = Path(folder, "cert.pem"), Path(folder, "key.pem")
                    for path, pem in ((chain, cert), (secret, key)):
                        path.touch(mode=0o600)
                        path.write_bytes(pem)
                    context.load_cert_chain(chain, secret)
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
            raise InvalidArgumentError(
                f"TLS cert/key: not a PEM certificate chain and its private key "
                f"({_source(self.cert)}, {_source(self.key)}): {e}"
            ) from e
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        return context
