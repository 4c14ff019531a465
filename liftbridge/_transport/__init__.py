"""The transports the router opens calls on: gRPC channels (grpcio), the SDK's own
HTTP/2 streams, and the SDK's own NATS connection. Nothing here knows a feature;
every module above this folder reaches a broker through the router.

gRPC's C core writes its own log lines to stderr, past Python's ``logging`` (a
failed TLS handshake prints "Handshake failed ..." at INFO on every attempt; the
SDK raises a typed error for it anyway). It reads ``GRPC_VERBOSITY`` once, when
``grpc`` is first imported, which is here (this folder holds the only grpc
imports). Unless the user set ``GRPC_VERBOSITY`` or ``GRPC_TRACE`` (traces print
at INFO), grpc is imported with ``GRPC_VERBOSITY=ERROR``, and the environment is
put back at once, so the process's ``os.environ`` and child processes never see
the SDK's setting. An application that imported grpc first keeps grpc's default.
"""

import os


def _import_grpc_quietly() -> None:
    if "GRPC_VERBOSITY" in os.environ or "GRPC_TRACE" in os.environ:
        return  # the user's setting stands
    os.environ["GRPC_VERBOSITY"] = "ERROR"
    try:
        import grpc  # noqa: F401  (the C core reads GRPC_VERBOSITY here)
    finally:
        os.environ.pop("GRPC_VERBOSITY", None)


_import_grpc_quietly()
