"""What a consumer-group member was created with (see ``Client.create_consumer``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from liftbridge._groups._pin import PinCallback
from liftbridge._groups._values import AutoOffset, OverflowRule, StreamPartition

AssignmentCallback = Callable[[tuple[StreamPartition, ...]], None]
"""``callback(partitions)``: the partitions gained or lost, sorted."""


@dataclass(frozen=True)
class MemberOptions:
    """A member's options, checked already."""

    group_id: str
    auto_checkpoint: float | None
    auto_offset: AutoOffset
    on_assigned: AssignmentCallback | None
    on_revoked: AssignmentCallback | None
    overflow: OverflowRule | None
    join_timeout: float
    pinned: bool = False
    pin_timeout: float | None = None
    on_pin: PinCallback | None = None
