"""The transport's :class:`Handover`, re-exported at the core boundary for the
gRPC publisher's sender (features import the transport's names from the core,
as :mod:`liftbridge._core._router` re-exports the ``Stream`` it opens).

A producer that queued a quarter of a window (256 at most, :data:`HAND_OVER`)
for a busy sender waits until the sender has taken them, handing it the GIL:
the shared PublishAsync stream's producers and ``publish_many_async`` parts
(:mod:`liftbridge._transport._handover` says why).
"""

from __future__ import annotations

from liftbridge._transport._handover import HAND_OVER as HAND_OVER
from liftbridge._transport._handover import Handover as Handover
