"""Publishes that name an ack inbox go by the unary Publish RPC.

The v1.9.0 server replaces the ack inbox of every request on a PublishAsync
stream with the stream's own (it reads the acks from there), so an
``ack_inbox`` sent on the SDK's streams would be silently ignored. The unary
Publish RPC keeps it: the server publishes the ack envelope to that NATS
subject, listens there itself, and returns the ack in the response.

``publish_async`` with an ack inbox makes the call on a short-lived thread of
its own (``liftbridge-inbox-publish``), which resolves the Future and hands
the ack handler to the client's ``liftbridge-callbacks`` thread, like every
other publish; the thread ends when the call does, within the publish's
timeout (sooner when the client closes).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future

from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._messages import Ack, ack_from_proto
from liftbridge._errors import (
    AckTimeoutError,
    DeadlineExceededError,
    LiftbridgeError,
    UnavailableError,
)
from liftbridge._publish._publisher import AckHandler
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

Invoke = Callable[[api_pb2.PublishRequest, float], api_pb2.PublishResponse]
"""Makes one unary Publish call with the given deadline in seconds."""


def publish(invoke: Invoke, request: api_pb2.PublishRequest, wait: float) -> Ack | None:
    """One unary publish, waiting up to ``wait`` seconds for its ack.

    Returns:
        The ack, or None for AckPolicy.NONE.

    Raises:
        AckTimeoutError: no ack in time (the message may have been stored).
        LiftbridgeError: the server refused the message, or the call failed.
    """
    try:
        response = invoke(request, wait)
    except DeadlineExceededError as e:
        raise AckTimeoutError(
            f"no ack for the publish to {request.stream!r} partition {request.partition} "
            f"within {wait:g}s; the message may or may not have been stored"
        ) from e
    if request.ackPolicy == api_pb2.NONE or not response.HasField("ack"):
        return None
    ack = ack_from_proto(response.ack)
    if ack.error is not None:
        raise ack.error
    return ack


def publish_async(
    invoke: Invoke,
    request: api_pb2.PublishRequest,
    wait: float,
    handler: AckHandler | None,
    callbacks: CallbackRunner,
) -> Future[Ack | None]:
    """Starts :func:`publish` on a thread of its own; see the module docstring."""
    future: Future[Ack | None] = callbacks.future()

    def run() -> None:
        ack: Ack | None = None
        error: LiftbridgeError | None = None
        try:
            ack = publish(invoke, request, wait)
        except LiftbridgeError as e:
            error = e
        except Exception as e:  # e.g. grpc's ValueError for a channel closed meanwhile
            _log.debug("publish %s failed", request.correlationId, exc_info=True)
            error = UnavailableError(f"the publish failed: {e!r}")
            error.__cause__ = e
        callbacks.settle(future, handler if request.ackPolicy != api_pb2.NONE else None, ack, error)

    threading.Thread(target=run, name="liftbridge-inbox-publish", daemon=True).start()
    return future
