"""A publish with an ``ack_inbox`` is answered with whatever ack the server
read first on that inbox (server v1.9.0's publishSync): the SDK hands a
publish only its own ack, by correlation id, and fails it with
:class:`~liftbridge.AckMismatchError` when the ack was another's."""

from __future__ import annotations

import pytest

import liftbridge
from liftbridge._publish import _inbox
from liftbridge_api import api_pb2


def _request(correlation_id: str) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(
        stream="s", value=b"v", correlationId=correlation_id, ackInbox="acks.shared"
    )


def _answered_with(correlation_id: str, ack_error: int = api_pb2.Ack.OK) -> _inbox.Invoke:
    ack = api_pb2.Ack(
        stream="s",
        offset=7,
        correlationId=correlation_id,
        ackInbox="acks.shared",
        ackPolicy=api_pb2.LEADER,
        ackError=ack_error,  # type: ignore[arg-type]
    )
    return lambda request, wait: api_pb2.PublishResponse(ack=ack)


def test_its_own_ack_is_returned() -> None:
    ack = _inbox.publish(_answered_with("mine"), _request("mine"), 1.0)
    assert ack is not None and (ack.correlation_id, ack.offset) == ("mine", 7)


@pytest.mark.parametrize("ack_error", [api_pb2.Ack.OK, api_pb2.Ack.INCORRECT_OFFSET])
def test_another_publishes_ack_is_never_handed_on(ack_error: int) -> None:
    """Nor its error: an incorrect offset refused the other message, not this one."""
    with pytest.raises(liftbridge.AckMismatchError, match=r"'mine'.*'theirs'") as raised:
        _inbox.publish(_answered_with("theirs", ack_error), _request("mine"), 1.0)
    error = raised.value
    assert (error.other_correlation_id, error.other_offset) == ("theirs", 7)
    assert error.maybe_applied and not error.retriable
