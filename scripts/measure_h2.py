"""What python-hyper ``h2`` would cost as the HTTP/2 state machine under the
SDK's batched I/O (issue 24), against the SDK's own frames.

Receive: the same server bytes (Subscribe-like: 100-byte messages, as many per
16 KiB DATA frame as fit, read 256 KiB at a time) fed to
:class:`liftbridge._transport._http2_reader.FrameReader` and to an
``h2.connection.H2Connection`` (events, flow-control acknowledgement, and the
same gRPC message slicing). Send: PublishAsync-like 64 KiB batches of requests
framed as DATA by each. Prints microseconds per message, best of five.

h2 is no dependency of the SDK: install it apart and point PYTHONPATH at it::

    pip install --target /tmp/h2lib h2
    PYTHONPATH=/tmp/h2lib .venv/bin/python scripts/measure_h2.py
"""

import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack

from liftbridge._transport._http2_reader import FrameReader
from liftbridge._transport._http2_windows import PeerWindows
from liftbridge._transport._http2_wire import MESSAGE_PREFIX, frame_bytes

MSG = b"m" * 95
PREFIXED = b"\0" + len(MSG).to_bytes(4, "big") + MSG
PER_FRAME = 16_384 // len(PREFIXED)
FRAMES = 2000
N = PER_FRAME * FRAMES


def server_bytes():
    enc = hpack.Encoder()
    head = (
        frame_bytes(0x4, 0, 0)
        + frame_bytes(0x4, 0x1, 0)
        + frame_bytes(
            0x1, 0x4, 1, enc.encode([(":status", "200"), ("content-type", "application/grpc")])
        )
    )
    body = frame_bytes(0x0, 0, 1, PREFIXED * PER_FRAME) * FRAMES
    return head, body


def ours(head, chunks):
    reader = FrameReader(
        bytes,
        max_message=1 << 26,
        windows=PeerWindows(),
        flow=threading.Condition(),
        reply=lambda f: None,
    )
    reader.feed(head)
    start = time.perf_counter()
    count = 0
    for c in chunks:
        reader.feed(c)
        count += len(reader.ready)
        reader.ready.clear()
    return time.perf_counter() - start, count


def hyper(head, chunks):
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    conn.initiate_connection()
    conn.update_settings(
        {
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 65536,
        }
    )
    conn.increment_flow_control_window((1 << 24) - 65535)
    conn.send_headers(
        1,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/proto.API/Subscribe"),
            (":authority", "x"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ],
    )
    conn.data_to_send()
    conn.receive_data(head)
    conn.data_to_send()
    prefix = MESSAGE_PREFIX.unpack_from
    body = bytearray()
    start = time.perf_counter()
    count = 0
    for c in chunks:
        for ev in conn.receive_data(c):
            if isinstance(ev, h2.events.DataReceived):
                data = ev.data
                if body:
                    body += data
                    data = bytes(body)
                    body.clear()
                pos, end = 0, len(data)
                while end - pos >= 5:
                    _, size = prefix(data, pos)
                    if end - pos - 5 < size:
                        break
                    bytes(data[pos + 5 : pos + 5 + size])
                    count += 1
                    pos += 5 + size
                if pos < end:
                    body += data[pos:]
                conn.acknowledge_received_data(ev.flow_controlled_length, 1)
        conn.data_to_send()
    return time.perf_counter() - start, count


def send_ours(batches):
    start = time.perf_counter()
    for b in batches:
        out = []
        for i in range(0, len(b), 16384):
            out.append(frame_bytes(0x0, 0, 1, b[i : i + 16384]))
        b"".join(out)
    return time.perf_counter() - start


def send_hyper(batches: list[bytes]) -> float:
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    conn.initiate_connection()
    conn.send_headers(
        1, [(":method", "POST"), (":scheme", "http"), (":path", "/p"), (":authority", "x")]
    )
    conn.data_to_send()
    # The server opens its windows wide, as the real one does.
    wide = (0x4).to_bytes(2, "big") + (1 << 30).to_bytes(4, "big")
    conn.receive_data(
        frame_bytes(0x4, 0, 0, wide) + frame_bytes(0x8, 0, 0, (1 << 30).to_bytes(4, "big"))
    )
    conn.data_to_send()
    start = time.perf_counter()
    for b in batches:
        for i in range(0, len(b), 16384):
            conn.send_data(1, b[i : i + 16384])
        conn.data_to_send()
    return time.perf_counter() - start


def main() -> None:
    head, body = server_bytes()
    chunks = [body[i : i + (1 << 18)] for i in range(0, len(body), 1 << 18)]
    best_o = min(ours(head, chunks)[0] for _ in range(5))
    best_h = min(hyper(head, chunks)[0] for _ in range(5))
    assert ours(head, chunks)[1] == hyper(head, chunks)[1] == N
    print(
        f"receive {N:,} x 100 B messages in {FRAMES} DATA frames: "
        f"ours {best_o / N * 1e6:.3f} us/msg, h2 {best_h / N * 1e6:.3f} us/msg, "
        f"h2/ours {best_h / best_o:.2f}"
    )
    req = b"\0" + (60).to_bytes(4, "big") + b"r" * 60
    batches = [req * 1000 for _ in range(200)]
    so = min(send_ours(batches) for _ in range(5))
    sh = min(send_hyper(batches) for _ in range(5))
    print(
        f"send 200,000 x 65 B requests in 64 KiB batches: ours {so / 200000 * 1e6:.3f} us/msg, "
        f"h2 {sh / 200000 * 1e6:.3f} us/msg, h2/ours {sh / so:.2f}"
    )


if __name__ == "__main__":
    main()
