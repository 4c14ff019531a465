"""A measurement, not a feature: where a paced end-to-end message waits, stage
by stage.

Drives :mod:`bench.e2e_probe`'s loop (``publish_async`` with a Future per
message at a fixed rate, a ``subscribe`` handler in the same process, one
``LocalServer``) and times each message at every step it passes, all on
``time.time_ns``: the clock of the server's append time (``Message.timestamp_ns``),
so no offset between two clocks drifts into the figures. A write is timed
when it returned, so the server may have appended before it (a GIL wait
after the syscall): ``to server`` can be negative.

- ``call``: the stamp (just before ``publish_async``) to its return;
- ``queued``: the return to the sender taking the request (0 for a publish
  its own thread wrote);
- ``write``: taken to its bytes handed to the socket (written by its own
  thread: the stamp to that, inside ``call``);
- ``to server``: the write to the server's append (``Message.timestamp_ns``:
  the socket, the server reading and appending);
- ``to reader``: the append to the subscription thread's read that brought
  it (the server's delivery, the socket, the thread's wake-up and GIL);
- ``to handler``: that read to the handler's call (parsing the read's
  messages, the handler calls before it).

Per rate it prints each stage's p50/p99, each stage's mean over the slowest
1 % of messages (where the tail comes from), the HTTP/2 flow-control facts
(WINDOW_UPDATE frames the SDK sent on each connection, the least of the
server's windows seen at a publish write, own writes refused for window),
and the pacing loop's lateness. With ``--gil`` a thread sleeping 1 ms at a
time reports how late it runs again (waking, then waiting for the GIL).

``--switch-interval S`` sets ``sys.setswitchinterval(S)`` in the probe's
process (the GIL's hand-off interval, 5 ms by default; the SDK never sets it).

Run: ``python -m bench.e2e_stages [--rates 1000,10000] [--secs 3] [--size 100] [--gil]
[--switch-interval S]``.
"""

from __future__ import annotations

import argparse
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import liftbridge
from bench.e2e import wait_for
from bench.e2e_probe import each_rate, thread_wakes
from bench.future_probe import _per_message, thread_cpu
from bench.stats import percentile
from liftbridge._publish._outbox import Outbox
from liftbridge._transport import _http2, _http2_reader
from liftbridge._transport._http2_wire import WINDOW_UPDATE

_MARK = b"\xe2\xe5l\xa7"  # starts each value: found again in a request's bytes
_STAMP = struct.Struct(f"<{len(_MARK)}sqq")  # the mark, time_ns at the stamp, the message's index
_STAGES = ("call", "queued", "write", "to server", "to reader", "to handler")


class Trace:
    """Every step's time per message index (time_ns; 0: not seen),
    filled by the patched SDK functions below."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.stamp = [0] * count
        self.returned = [0] * count
        self.taken = [0] * count
        self.written = [0] * count
        self.appended = [0] * count
        self.read = [0] * count
        self.handled = [0] * count
        self.own = [False] * count
        self.window_updates: dict[str, int] = {}
        self.least_window = 1 << 31
        self.refused = 0
        self.last_read = 0  # the subscription thread's last read (it alone writes it)
        self.all_in = threading.Event()
        self.arrived = 0

    def handler(self, message: liftbridge.Message | None, error: BaseException | None) -> None:
        now = time.time_ns()
        if message is None:
            self.all_in.set()
            return
        _, _, index = _STAMP.unpack_from(message.value)
        self.handled[index] = now
        self.read[index] = self.last_read
        self.appended[index] = message.timestamp_ns
        self.arrived += 1
        if self.arrived == self.count:
            self.all_in.set()


_TRACE: list[Trace] = []


def _index(request: Any) -> int:
    value = getattr(request, "value", None)  # the generated class: the value itself
    if value is None:  # a request kept as its bytes: the value inside them
        value = request.SerializeToString()
        value = value[value.index(_MARK) :]
    return int(_STAMP.unpack_from(value)[2])


def _patch() -> None:
    """Wraps the SDK's steps once per process; they report to ``_TRACE[-1]``."""
    taken_here = threading.local()
    next_request, next_ready = Outbox.__next__, Outbox.next_ready
    send_data, write_now = _http2.Http2Call._send_data, _http2.Http2Call.write_now
    send_run = _http2.Http2Call._send_run
    queue, feed = _http2.Http2Call._queue, _http2_reader.FrameReader.feed

    def taken(request: Any) -> None:
        if request is not None and _TRACE:
            index = _index(request)
            _TRACE[-1].taken[index] = time.time_ns()
            taken_here.__dict__.setdefault("run", []).append(index)

    def outbox_next(self: Outbox) -> Any:
        request = next_request(self)
        taken(request)
        return request

    def outbox_ready(self: Outbox) -> Any:
        request = next_ready(self)
        taken(request)
        return request

    def least_window(self: Any) -> None:
        if _TRACE:
            with self._flow:
                least = min(self._peer.stream, self._peer.conn)
            _TRACE[-1].least_window = min(_TRACE[-1].least_window, least)

    def run_written() -> None:  # the sender's run taken since its last write is out
        now = time.time_ns()
        run = taken_here.__dict__.pop("run", [])
        if _TRACE:
            for index in run:
                _TRACE[-1].written[index] = now

    def sent(self: Any, payload: bytes, *, end_stream: bool) -> bool:
        least_window(self)
        ok: bool = send_data(self, payload, end_stream=end_stream)
        run_written()
        return ok

    def run_sent(self: Any, parts: list[bytes], size: int) -> bool:
        # The sender's usual write (a run in one frame, straight to _send,
        # not through _send_data): its publishes were timed at some later
        # _send_data (write p99 ~1.7 s) or never (untraced, ~10 %).
        least_window(self)
        ok: bool = send_run(self, parts, size)
        run_written()
        return ok

    def own(self: Any, request: Any) -> bool:
        ok: bool = write_now(self, request)
        if _TRACE:
            trace = _TRACE[-1]
            if ok:
                index = _index(request)
                trace.written[index] = time.time_ns()
                trace.own[index] = True
                least_window(self)
            else:
                trace.refused += 1
        return ok

    def queued(self: Any, frame: bytes) -> None:
        if _TRACE and frame[3] == WINDOW_UPDATE:
            name = threading.current_thread().name.split("-")[1]
            updates = _TRACE[-1].window_updates
            updates[name] = updates.get(name, 0) + frame.count(bytes((0, 0, 4, WINDOW_UPDATE)))
        queue(self, frame)

    def fed(self: Any, data: bytes) -> None:
        if _TRACE and threading.current_thread().name.startswith("liftbridge-sub-"):
            _TRACE[-1].last_read = time.time_ns()
        feed(self, data)

    Outbox.__next__ = outbox_next  # type: ignore[method-assign]
    Outbox.next_ready = outbox_ready  # type: ignore[method-assign]
    _http2.Http2Call._send_data = sent  # type: ignore[method-assign]
    _http2.Http2Call._send_run = run_sent  # type: ignore[method-assign]
    _http2.Http2Call.write_now = own  # type: ignore[method-assign]
    _http2.Http2Call._queue = queued  # type: ignore[method-assign]
    _http2_reader.FrameReader.feed = fed  # type: ignore[method-assign]


def _gil_lateness(stop: threading.Event, late: list[float]) -> None:
    """Sleeps 1 ms at a time; records how much later than that it ran again."""
    while not stop.is_set():
        before = time.perf_counter()
        time.sleep(0.001)
        late.append((time.perf_counter() - before - 0.001) * 1e3)


def _fmt(values: list[float]) -> str:
    ordered = sorted(values)
    return f"{percentile(ordered, 50):6.2f} {percentile(ordered, 99):6.2f}"


def run(
    client: liftbridge.Client, stream: str, size: int, rate: float, count: int, gil: bool
) -> str:
    """``count`` publishes paced at ``rate`` msgs/s; its figures."""
    trace = Trace(count)
    _TRACE.append(trace)
    padding = b"x" * max(0, size - _STAMP.size)
    subscription = client.subscribe(stream, trace.handler)
    late: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_gil_lateness, args=(stop, late), name="gil-probe")
    lateness = []
    try:
        time.sleep(0.2)  # the subscription is in place
        if gil:
            watcher.start()
        wakes, cpu = thread_wakes(), thread_cpu()
        start = time.perf_counter()
        publish, stamp, returned = client.publish_async, trace.stamp, trace.returned
        for i in range(count):
            due = start + i / rate
            wait_for(due)
            lateness.append((time.perf_counter() - due) * 1e3)
            now = time.time_ns()
            stamp[i] = now
            publish(stream, _STAMP.pack(_MARK, now, i) + padding)
            returned[i] = time.time_ns()
        trace.all_in.wait(60.0)
        split = _per_message(cpu, thread_cpu(), count)
        after = thread_wakes()
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join()
        subscription.close()
        _TRACE.remove(trace)
    return _report(trace, rate, split, wakes, after, lateness, late)


def _report(
    trace: Trace,
    rate: float,
    split: str,
    wakes: dict[str, int],
    after: dict[str, int],
    lateness: list[float],
    gil: list[float],
) -> str:
    count = trace.count
    seen = [i for i in range(count) if trace.handled[i] and trace.written[i]]
    stages: dict[str, list[float]] = {name: [] for name in _STAGES}
    totals = []
    steps: list[tuple[str, Callable[[int], int], Callable[[int], int]]] = [
        ("call", trace.stamp.__getitem__, trace.returned.__getitem__),
        ("queued", trace.returned.__getitem__, lambda i: trace.taken[i] or trace.returned[i]),
        ("write", lambda i: trace.taken[i] or trace.stamp[i], trace.written.__getitem__),
        ("to server", trace.written.__getitem__, trace.appended.__getitem__),
        ("to reader", trace.appended.__getitem__, trace.read.__getitem__),
        ("to handler", trace.read.__getitem__, trace.handled.__getitem__),
    ]
    for i in seen:
        for name, begin, end in steps:
            stages[name].append((end(i) - begin(i)) / 1e6)
        totals.append((trace.handled[i] - trace.stamp[i]) / 1e6)
    slowest = sorted(range(len(seen)), key=totals.__getitem__)[-max(1, len(seen) // 100) :]
    lines = [
        f"{rate:,.0f} msgs/s: {len(seen)} of {count} traced; total p50/p99 {_fmt(totals)} ms; "
        f"own writes {sum(trace.own) / count:.2f} (refused for window {trace.refused})",
        "  stage        p50    p99   mean of slowest 1 %",
    ]
    for name in _STAGES:
        tail = sum(stages[name][k] for k in slowest) / len(slowest)
        lines.append(f"  {name:<10} {_fmt(stages[name])}   {tail:6.2f}")
    woke = ", ".join(
        f"{name} {(after[name] - wakes.get(name, 0)) / count:.2f}"
        for name in sorted(after)
        if after[name] - wakes.get(name, 0) >= 0.02 * count
    )
    lines += [
        f"  pacing lateness p50/p99 {_fmt(lateness)} ms"
        + (f"; a 1 ms sleeper runs late p50/p99 {_fmt(gil)} ms" if gil else ""),
        f"  WINDOW_UPDATE frames sent: {trace.window_updates or 'none'}; "
        f"least server window at a publish write {trace.least_window} bytes",
        f"  CPU us/msg: {split}",
        f"  wake-ups/msg: {woke}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,10000")
    parser.add_argument("--secs", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="seconds: sys.setswitchinterval for this process (a measurement of the GIL's "
        "hand-off; the SDK never sets it)",
    )
    parser.add_argument("--gil", action="store_true", help="run the 1 ms sleeper")
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    _patch()
    each_rate(
        args.rates,
        args.reps,
        "e2e-stages",
        lambda client, stream, rate: run(
            client, stream, args.size, rate, int(rate * args.secs), args.gil
        ),
    )


if __name__ == "__main__":
    main()
