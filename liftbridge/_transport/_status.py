"""How a call that failed on a transport becomes the SDK's exception: the
gRPC status a grpcio call or an own HTTP/2 stream ended with, read off the
call and handed to :func:`liftbridge._errors.from_status`."""

from __future__ import annotations

import grpc

from liftbridge._errors import LiftbridgeError, from_status


def from_rpc_error(err: grpc.RpcError) -> LiftbridgeError:
    """The SDK's exception for a failed gRPC call or stream.

    Callers keep the original as ``__cause__`` (``raise from_rpc_error(e) from e``).

    Args:
        err: an error raised by a gRPC call or stream (a ``grpc.Call``), or
            by the SDK's own HTTP/2 stream (whose ``unprocessed`` says the
            server refused it before processing it).
    """
    code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (err.details() if isinstance(err, grpc.Call) else str(err)) or ""
    return from_status(code.name, details, unprocessed=getattr(err, "unprocessed", False))
