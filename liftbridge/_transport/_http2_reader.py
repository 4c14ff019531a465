"""Reading a server's HTTP/2 frames for one client stream, with no I/O.

:class:`FrameReader` is fed the bytes a connection received, in pieces cut
anywhere, and turns them into the stream's responses, the frames to send
back (SETTINGS and PING acks, WINDOW_UPDATE) and how the stream ended. It
checks what RFC 9113 asks a client to check of a peer, so a misbehaving
broker ends the call with a typed error, never grows memory or spins:

- frame sizes against our SETTINGS_MAX_FRAME_SIZE (16 KiB, §4.2), fixed
  sizes of SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, PRIORITY, GOAWAY (§6);
- stream ids: only stream 1 (ours) and 0 are known; a frame on any other id
  (never opened, idle) is a connection error (§5.1), push is refused (§8.4);
- header blocks: CONTINUATION only right after a block that did not end, on
  its stream (§6.10), the block and its decoded list capped (§10.5.1);
- SETTINGS values in range (§6.5.2), WINDOW_UPDATE non-zero and not past
  2^31-1 (§6.9), DATA within the receive window we granted (§6.9.1);
- a gRPC message's length prefix against the client's size limit, before any
  of its body is kept.

Not thread-safe: one thread feeds it at a time (the call's ``_read_lock``).
The peer's flow-control windows are shared with the call's sending thread:
the reader changes them under the lock it is given.
"""

from __future__ import annotations

import collections
import struct
import threading
from collections.abc import Callable
from typing import Generic, TypeVar
from urllib.parse import unquote

import grpc
import hpack

from liftbridge._transport._http2_windows import RECEIVE_WINDOW, REOPEN_AT, PeerWindows
from liftbridge._transport._http2_wire import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_AND_PREFIX,
    FRAME_HEAD,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    HTTP_STATUS,
    MAX_FRAME_IN,
    MAX_WINDOW,
    MESSAGE_PREFIX,
    PADDED,
    PING,
    PRIORITY,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RESET_STATUS,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_FRAME_SIZE,
    STREAM,
    WINDOW_UPDATE,
    StreamError,
    compressed_error,
    connection_error,
    frame_bytes,
    grpc_status,
)

T = TypeVar("T")

PRIORITY_FRAME, PUSH_PROMISE = 0x2, 0x5
MAX_FRAME_SIZE_LIMIT = (1 << 24) - 1
"""The largest SETTINGS_MAX_FRAME_SIZE a peer may announce (§6.5.2)."""
_REOPEN_BELOW = RECEIVE_WINDOW - REOPEN_AT
"""The receive window left once REOPEN_AT bytes were read."""
MAX_HEADER_LIST = 1 << 16
"""The largest header block we keep (compressed, CONTINUATIONs included) and
the largest header list we decode (hpack's measure: names, values and 32
bytes per field); announced as SETTINGS_MAX_HEADER_LIST_SIZE."""
MAX_PENDING_REPLIES = 1 << 18
"""Bytes of SETTINGS/PING acks we hold for a peer that does not read them:
past that it is flooding us (a PING ack is 17 bytes: ~15,000 unanswered
PINGs), and the connection ends with ENHANCE_YOUR_CALM instead of growing."""
DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024
"""grpcio's default limit on a received message, and the client's."""

_PING_ACK_HEAD = frame_bytes(PING, ACK, 0, bytes(8))[:9]  # a PING ack's 9 bytes before its payload
_SHORT_CONTROL = frozenset((WINDOW_UPDATE, PING))
"""Control frames :meth:`FrameReader.feed` hands straight to their own methods:
a server sends one of each per ack at a paced rate, and neither changes the
stream's state or our receive window."""
_NOT_PLAIN = PADDED | END_STREAM
"""DATA flags that take a frame off :meth:`FrameReader.feed`'s own loop."""
_HEAD, _PREFIX = FRAME_HEAD.unpack_from, MESSAGE_PREFIX.unpack_from
_HEAD_AND_PREFIX = FRAME_AND_PREFIX.unpack_from
_HEAD_AND_WORD = struct.Struct(">IBII").unpack_from
"""The unpackers :meth:`FrameReader.feed` uses, bound once."""
_WINDOW_UPDATE_4, _PING_8 = 4 << 8 | WINDOW_UPDATE, 8 << 8 | PING
"""A frame header's first word (length and type) for a well-formed
WINDOW_UPDATE and PING."""


def _past_window() -> StreamError:
    return connection_error(
        FLOW_CONTROL_ERROR, "the server sent past the receive window we granted"
    )


class FrameReader(Generic[T]):
    """The server side of stream 1, read frame by frame. See the module docstring.

    ``reply`` is given each frame to send back (SETTINGS and PING acks,
    WINDOW_UPDATE); it raises :class:`StreamError` (ENHANCE_YOUR_CALM) when
    the peer lets too many pile up unread.

    Attributes:
        ready: responses parsed and not taken yet.
        ended: True once the stream ended (``end`` says how).
        end: None while open or for an OK status, else the stream's error.
        pongs: PING acks received (for the call's keepalive).
    """

    def __init__(
        self,
        parse: Callable[[bytes], T],
        *,
        max_message: int,
        windows: PeerWindows,
        flow: threading.Condition,
        reply: Callable[[bytes], None],
        flow_lock: threading.Lock | None = None,
    ) -> None:
        self._parse = parse
        self._max_message = max_message
        # The largest message a plain DATA frame may carry whole (the limit, or
        # what fits a frame), worked out once: feed runs once per read.
        self._one = min(max_message, MAX_FRAME_IN - 5)
        self._windows = windows
        self._flow = flow
        # flow's lock (else flow): taken directly where nobody waits, no Python call.
        self._flow_lock: threading.Lock | threading.Condition = flow_lock or flow
        self._reply = reply
        self.ready: collections.deque[T] = collections.deque()
        self.ended = False
        self.end: StreamError | None = None
        self.pongs = 0
        # The start of a frame not wholly read yet, appended to in place: a
        # frame arriving in many small reads costs its size, not its size squared.
        self._rest = bytearray()
        self._need = FRAME_HEAD.size  # bytes _rest must reach before a frame can be whole
        self._body = bytearray()  # the start of a message that spans DATA frames
        self._block = bytearray()  # a header block awaiting CONTINUATION
        self._continuing = False  # the last frame was HEADERS/CONTINUATION without END_HEADERS
        self._block_end_stream = False
        self._headers_seen = False
        self._plain_now = False  # _plain() as it was when feed last returned
        # What the peer may still send us (stream = connection); what it sent
        # since the windows were last reopened is RECEIVE_WINDOW minus this.
        self._window = RECEIVE_WINDOW
        self._decoder = hpack.Decoder()
        self._decoder.max_header_list_size = MAX_HEADER_LIST

    def feed(self, data: bytes) -> None:
        """Handles every whole frame of what was left over and ``data``.

        Responses are sliced out as ``bytes`` (protobuf parses those several
        times faster than memoryviews) and parsed as their frame is read, so
        the ones before a frame ending the call come out. A frame begun in an
        earlier read is completed from the start of ``data`` and read alone
        (:meth:`_complete`): the rest of ``data`` is read where it lies, never
        copied behind it; the start of a frame not wholly there is kept.

        Most frames are DATA on our stream between the response headers and
        the trailers, each starting with a whole message (the server sends a
        message per frame): those are read by the loop itself, their checks
        on locals (the receive window included), while :meth:`_plain` holds
        (worked out after every other frame, and kept between reads). The
        commonest, a frame that is exactly one message no larger than the
        limit and a frame we accept, takes one unpack of its header and
        prefix together and goes straight to ``parse``: every check the
        general loop makes holds for it by then. Every other frame goes
        through :meth:`_frame`, which checks what it may be and do.

        Raises:
            StreamError: the peer broke the protocol (``goaway`` set: a
                connection error) or a limit; the reader is then ended.
        """
        pos = 0
        if (self._rest or self.ended) and (pos := self._complete(data)) < 0:
            return
        end, need = len(data), 9  # need: bytes a frame start kept must reach
        parse, ready, one = self._parse, self.ready, self._one
        window, plain = self._window, self._plain_now
        try:
            while end - pos >= 9:
                # data[pos + 3]: the frame's type, DATA (0) or not: a control frame's
                # failed unpack costs more than the look (~1,600 instructions a frame).
                while plain and end - pos >= 14 and not data[pos + 3]:
                    word, flags, stream, compressed, length = _HEAD_AND_PREFIX(data, pos)
                    size = length + 5
                    stop = pos + 9 + size
                    # DATA (type 0) of exactly one message, whole in data, on
                    # stream 1 (reserved bit clear), without flags (so neither
                    # padded nor ending the stream), uncompressed, within the limit.
                    if not (
                        word == size << 8
                        and stop <= end
                        and length <= one
                        and stream == STREAM
                        and not flags | compressed
                    ):
                        break
                    window -= size
                    if window < 0:
                        raise _past_window()
                    pos = stop
                    ready.append(parse(data[pos - length : pos]))
                if end - pos < 9:
                    break
                if end - pos >= 13:  # the payload's first 4 bytes too: a WINDOW_UPDATE's increment
                    word, flags, stream, first = _HEAD_AND_WORD(data, pos)
                else:
                    word, flags, stream = _HEAD(data, pos)
                    first = 0
                size = word >> 8
                if size > MAX_FRAME_IN:
                    raise connection_error(
                        FRAME_SIZE_ERROR,
                        f"a {size}-byte frame, past our {MAX_FRAME_IN}-byte limit",
                    )
                start = pos + 9
                stop = start + size
                if stop > end:
                    need = stop - pos  # its head was checked: wait for the whole frame
                    break
                pos = stop
                kind = word & 0xFF
                if kind in _SHORT_CONTROL and not self._continuing:  # not via _control: a call less
                    stream &= 0x7FFF_FFFF
                    # The usual ones (grpc-go's per request) handled here, a few calls
                    # less; anything else (malformed, or past 2^31-1) by their methods.
                    if word == _WINDOW_UPDATE_4 and stream <= STREAM and first & 0x7FFF_FFFF:
                        increment, windows = first & 0x7FFF_FFFF, self._windows
                        with self._flow_lock:  # PeerWindows.update's, without its call
                            if not stream and (grown := windows.conn + increment) <= MAX_WINDOW:
                                windows.conn = grown
                            elif stream and (grown := windows.stream + increment) <= MAX_WINDOW:
                                windows.stream = grown
                            else:
                                windows.update(stream, increment)  # raises: past 2^31-1
                            if windows.waiting:  # a sender waits for window: wake it
                                self._flow.notify_all()
                    elif word == _PING_8 and not stream:
                        if flags & ACK:
                            self.pongs += 1
                        else:
                            self._reply(_PING_ACK_HEAD + data[start:stop])
                    elif kind == WINDOW_UPDATE:
                        self._window_update(stream, data[start:stop])
                    else:
                        self._ping(flags, stream, data[start:stop])
                    continue
                if not (plain and kind == DATA and stream == STREAM and not flags & _NOT_PLAIN):
                    self._window = window
                    self._frame(kind, flags, stream & 0x7FFF_FFFF, data, start, stop)
                    window = self._window
                    plain = self._plain()
                    if self.ended:
                        break
                    continue
                window -= size
                if window < 0:
                    raise _past_window()
                while stop - start >= 5:
                    compressed, length = _PREFIX(data, start)
                    if length > self._max_message:
                        raise self._too_large(length)
                    if stop - start - 5 < length:
                        break
                    if compressed:
                        raise compressed_error()
                    start += 5 + length
                    ready.append(parse(data[start - length : start]))
                if start < stop:  # part of a message: gathered until it is whole
                    self._body += data[start:stop]
                    self._messages()
                    plain = self._plain()
        except StreamError as e:
            self._end(e)
            raise
        except Exception as e:  # a response protobuf cannot parse, say: never a raw error
            error = StreamError(grpc.StatusCode.INTERNAL, f"unreadable response: {e}")
            self._end(error)
            raise error from e
        finally:
            if not self.ended:
                self._window, self._plain_now = window, plain
                if pos < end:  # the start of a frame to come (usually none is left)
                    self._rest += memoryview(data)[pos:]
                    self._need = need
        if window <= _REOPEN_BELOW and not self.ended:  # (the window as kept just above)
            unacked = RECEIVE_WINDOW - window
            self._window = RECEIVE_WINDOW
            increment = unacked.to_bytes(4, "big")
            self._reply(
                frame_bytes(WINDOW_UPDATE, 0, 0, increment)
                + frame_bytes(WINDOW_UPDATE, 0, STREAM, increment)
            )

    def _complete(self, data: bytes) -> int:
        """Completes the frame begun in ``_rest`` from the start of ``data``
        and reads it alone; where the frames of ``data`` itself start, or -1
        when there is nothing more to read of it (still short, or ended)."""
        rest = self._rest
        if self.ended:
            return -1
        if len(rest) + len(data) < self._need:  # still no whole frame: keep it
            rest += data
            return -1
        pos = 0
        while rest and not self.ended:  # its head first, then (its size known) its body
            take = self._need - len(rest)
            rest += data[pos : pos + take]
            pos += take
            if len(rest) < self._need:
                return -1
            self._rest = bytearray()
            FrameReader.feed(self, bytes(rest))  # the class's: a wrapped feed sees reads only
            rest = self._rest
        return -1 if self.ended else pos

    def _end(self, error: StreamError | None) -> None:
        if not self.ended:
            self.ended = True
            self.end = error
            self._rest = bytearray()
            self._body = bytearray()
            self._block = bytearray()

    def _plain(self) -> bool:
        """Whether a DATA frame on our stream may be read by :meth:`feed`'s
        own loop: the response headers came, no header block is open, no
        message is part-gathered (kept in ``_plain_now`` between reads)."""
        return self._headers_seen and not self._continuing and not self._body and not self.ended

    def _frame(
        self, kind: int, flags: int, stream: int, data: bytes, start: int, stop: int
    ) -> None:
        """Checks and handles one frame other than a plain DATA frame."""
        if self._continuing and (kind != CONTINUATION or stream != STREAM):
            raise connection_error(PROTOCOL_ERROR, f"a frame of type {kind} inside a header block")
        if kind != DATA:
            self._control(kind, flags, stream, data[start:stop])
            return
        self._data_allowed(stream, stop - start)
        if flags & PADDED:
            if stop == start or data[start] >= stop - start:
                raise connection_error(PROTOCOL_ERROR, "DATA padding past its frame")
            stop -= data[start]
            start += 1
        if start < stop:
            self._body += data[start:stop]
            self._messages()
        if flags & END_STREAM:
            self._end(
                StreamError(grpc.StatusCode.INTERNAL, "the stream ended without a gRPC status")
            )

    def _data_allowed(self, stream: int, size: int) -> None:
        if stream != STREAM:
            raise connection_error(PROTOCOL_ERROR, f"DATA on stream {stream}, never opened")
        if not self._headers_seen:
            raise connection_error(PROTOCOL_ERROR, "DATA before the response headers")
        self._window -= size
        if self._window < 0:
            raise _past_window()

    def _too_large(self, length: int) -> StreamError:
        return StreamError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"received message larger than max ({length} vs. {self._max_message})",
        )

    def _messages(self) -> None:
        """Parses the whole messages gathered in ``_body`` (ones that spanned
        frames); a prefix over the limit ends the call before more is kept."""
        body = self._body
        pos, end = 0, len(body)
        prefix = MESSAGE_PREFIX.unpack_from
        while end - pos >= 5:
            compressed, size = prefix(body, pos)
            if size > self._max_message:
                raise self._too_large(size)
            if end - pos - 5 < size:
                break
            if compressed:
                raise compressed_error()
            self.ready.append(self._parse(bytes(body[pos + 5 : pos + 5 + size])))
            pos += 5 + size
        del body[:pos]

    # ------------------------------------------------------------- control --

    def _control(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        # Never WINDOW_UPDATE or PING: feed hands those to their own methods.
        if kind in (HEADERS, CONTINUATION):
            self._header_frame(kind, flags, stream, payload)
        elif kind == SETTINGS:
            self._settings(flags, stream, payload)
        elif kind == RST_STREAM:
            if len(payload) != 4:
                raise connection_error(FRAME_SIZE_ERROR, "an RST_STREAM not 4 bytes long")
            if stream != STREAM:
                raise connection_error(PROTOCOL_ERROR, f"RST_STREAM on stream {stream}")
            code = int.from_bytes(payload, "big")
            status = RESET_STATUS.get(code, grpc.StatusCode.INTERNAL)
            raise StreamError(
                status,
                f"the server reset the stream (HTTP/2 error {code})",
                unprocessed=code == REFUSED_STREAM,
            )
        elif kind == GOAWAY:
            if stream != 0 or len(payload) < 8:
                raise connection_error(PROTOCOL_ERROR, "a malformed GOAWAY")
            last = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
            code = int.from_bytes(payload[4:8], "big")
            if last < STREAM or code != 0:
                raise StreamError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"the server is closing the connection (GOAWAY, HTTP/2 error {code})",
                    unprocessed=last < STREAM,
                )
        elif kind == PRIORITY_FRAME:
            if stream == 0 or len(payload) != 5:
                raise connection_error(PROTOCOL_ERROR, "a malformed PRIORITY")
        elif kind == PUSH_PROMISE:
            raise connection_error(PROTOCOL_ERROR, "PUSH_PROMISE, though push was refused")
        # Frames of unknown types are ignored (§5.5).

    def _ping(self, flags: int, stream: int, payload: bytes) -> None:
        if stream != 0 or len(payload) != 8:
            raise connection_error(
                PROTOCOL_ERROR if stream else FRAME_SIZE_ERROR, "a malformed PING"
            )
        if flags & ACK:
            self.pongs += 1
        else:
            self._reply(_PING_ACK_HEAD + payload)

    def _window_update(self, stream: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise connection_error(FRAME_SIZE_ERROR, "a WINDOW_UPDATE not 4 bytes long")
        if stream not in (0, STREAM):
            raise connection_error(PROTOCOL_ERROR, f"WINDOW_UPDATE on stream {stream}")
        increment = int.from_bytes(payload, "big") & 0x7FFF_FFFF
        if increment == 0:
            raise connection_error(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
        # A sender is woken only when one waits for window. A with: a unary
        # call reads on the caller's thread, where Ctrl-C may land.
        with self._flow_lock:
            self._windows.update(stream, increment)
            if self._windows.waiting:
                self._flow.notify_all()

    def _settings(self, flags: int, stream: int, payload: bytes) -> None:
        if stream != 0:
            raise connection_error(PROTOCOL_ERROR, f"SETTINGS on stream {stream}")
        if flags & ACK:
            if payload:
                raise connection_error(FRAME_SIZE_ERROR, "a SETTINGS ack with a payload")
            return
        if len(payload) % 6:
            raise connection_error(FRAME_SIZE_ERROR, "a SETTINGS frame not in 6-byte entries")
        initial = max_frame = None
        for at in range(0, len(payload), 6):
            key = int.from_bytes(payload[at : at + 2], "big")
            value = int.from_bytes(payload[at + 2 : at + 6], "big")
            if key == SETTINGS_ENABLE_PUSH and value > 1:
                raise connection_error(PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH {value}")
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise connection_error(
                        FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value}"
                    )
                initial = value
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not 16_384 <= value <= MAX_FRAME_SIZE_LIMIT:
                    raise connection_error(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value}")
                max_frame = value
        with self._flow:
            self._windows.settings(initial, max_frame)
            self._flow.notify_all()
        self._reply(frame_bytes(SETTINGS, ACK, 0))

    def _header_frame(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if stream != STREAM:
            raise connection_error(PROTOCOL_ERROR, f"a header block on stream {stream}")
        if kind == HEADERS:
            if flags & PADDED:
                if not payload or payload[0] >= len(payload):
                    raise connection_error(PROTOCOL_ERROR, "HEADERS padding past its frame")
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY:
                if len(payload) < 5:
                    raise connection_error(FRAME_SIZE_ERROR, "HEADERS too short for priority")
                payload = payload[5:]
            self._block = bytearray(payload)
            self._block_end_stream = bool(flags & END_STREAM)
        elif not self._continuing:
            raise connection_error(PROTOCOL_ERROR, "CONTINUATION without a header block")
        else:
            self._block += payload
        if len(self._block) > MAX_HEADER_LIST:
            raise connection_error(PROTOCOL_ERROR, f"a header block past {MAX_HEADER_LIST} bytes")
        self._continuing = not flags & END_HEADERS
        if not self._continuing:
            block, self._block = bytes(self._block), bytearray()
            self._headers(block, self._block_end_stream)

    def _decode(self, block: bytes) -> dict[str, str]:
        try:
            fields = self._decoder.decode(block, raw=True)
        except hpack.OversizedHeaderListError as e:
            raise connection_error(PROTOCOL_ERROR, f"a header list too large: {e}") from e
        except Exception as e:  # hpack's own errors, and any a malformed block provokes
            # Named by type: hpack's texts may hold a memoryview's address.
            raise connection_error(
                COMPRESSION_ERROR, f"an undecodable header block ({type(e).__name__})"
            ) from e
        # Not UTF-8 (a grpc-message should be percent-encoded, not all are):
        # the status still counts.
        return {
            (name.decode(errors="replace") if isinstance(name, bytes) else name): (
                value.decode(errors="replace") if isinstance(value, bytes) else value
            )
            for name, value in fields
        }

    def _headers(self, block: bytes, end_stream: bool) -> None:
        headers = self._decode(block)
        if not self._headers_seen:
            self._headers_seen = True
            status = headers.get(":status")
            if status != "200":
                if "grpc-status" not in headers:
                    raise StreamError(
                        HTTP_STATUS.get(status or "", grpc.StatusCode.UNKNOWN),
                        f"the server answered HTTP status {status}",
                    )
                end_stream = True  # a gRPC status ends the call, whatever came with it
        elif not end_stream:
            raise connection_error(PROTOCOL_ERROR, "trailers that do not end the stream")
        if not end_stream:
            return
        self._messages()
        code = grpc_status(headers.get("grpc-status"))
        if code == grpc.StatusCode.OK and self._body:
            self._end(
                StreamError(
                    grpc.StatusCode.INTERNAL,
                    f"the stream ended inside a response ({len(self._body)} bytes of it came)",
                )
            )
        elif code == grpc.StatusCode.OK:
            self._end(None)
        else:
            self._end(StreamError(code, unquote(headers.get("grpc-message", ""))))
