"""Flow control of the SDK's HTTP/2 calls (RFC 9113 §6.9): the windows we
grant the server and :class:`PeerWindows`, what the server grants us.

:class:`~liftbridge._transport._http2_reader.FrameReader` keeps our receive
window as it reads and reopens it; the peer's windows are shared between the
reader (WINDOW_UPDATE, SETTINGS) and the call's writers, under the call's
``_flow`` condition.
"""

from __future__ import annotations

from liftbridge._transport._http2_wire import FLOW_CONTROL_ERROR, MAX_WINDOW, connection_error

RECEIVE_WINDOW = 1 << 24
"""Our stream's and connection's receive window: 16 MiB of responses may be
on their way before the server waits for a WINDOW_UPDATE."""
REOPEN_AT = RECEIVE_WINDOW // 4
"""Bytes read before the windows are reopened by what was read."""
PEER_WINDOW = 65_535
"""The peer's windows until its SETTINGS say otherwise (RFC 9113 §6.9.2)."""


class PeerWindows:
    """The peer's flow-control windows and frame size limit: what we may send.

    Not locked itself: the call's ``_flow`` condition guards it.
    """

    def __init__(self) -> None:
        self.stream = PEER_WINDOW
        self.conn = PEER_WINDOW
        self.initial = PEER_WINDOW
        self.max_frame = 16_384
        self.waiting = 0  # senders waiting on the condition for window (only they need a notify)

    def settings(self, initial: int | None, max_frame: int | None) -> None:
        """Applies a SETTINGS frame's values (already range-checked).

        Raises:
            StreamError: the new initial window takes the stream's past 2^31-1.
        """
        if initial is not None:
            stream = self.stream + initial - self.initial
            if stream > MAX_WINDOW:
                raise connection_error(
                    FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {initial} overflows"
                )
            self.stream, self.initial = stream, initial
        if max_frame is not None:
            self.max_frame = max_frame

    def update(self, stream: int, increment: int) -> None:
        """Applies a WINDOW_UPDATE (non-zero, checked by the reader).

        Raises:
            StreamError: the window would pass 2^31-1 (§6.9.1).
        """
        if stream == 0:
            if self.conn + increment > MAX_WINDOW:
                raise connection_error(FLOW_CONTROL_ERROR, "the connection window overflowed")
            self.conn += increment
        else:
            if self.stream + increment > MAX_WINDOW:
                raise connection_error(FLOW_CONTROL_ERROR, "the stream window overflowed")
            self.stream += increment
