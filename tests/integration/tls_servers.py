"""Real TLS servers for the TLS test modules, from the certificate files each
module makes (``pki``: server_cert, server_key, ca, client_cert, client_key)."""

from __future__ import annotations

from pathlib import Path

from liftbridge.testing import LocalServer


def tls_server(pki: dict[str, Path]) -> LocalServer:
    """A server that requires TLS."""
    return LocalServer(tls_cert=pki["server_cert"], tls_key=pki["server_key"], tls_ca=pki["ca"])


def mtls_server(pki: dict[str, Path]) -> LocalServer:
    """A server that also requires a client certificate signed by ``pki["ca"]``."""
    return LocalServer(
        tls_cert=pki["server_cert"],
        tls_key=pki["server_key"],
        tls_ca=pki["ca"],
        tls_client_ca=pki["ca"],
        tls_client_cert=pki["client_cert"],
        tls_client_key=pki["client_key"],
    )
