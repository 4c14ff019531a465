"""A measurement, not a feature: ``liftbridge-acks``'s instructions per ack
of paced ``publish_async`` against a real Liftbridge server.

:mod:`bench.publish_cg` and :mod:`bench.read_cg` ack from a grpcio peer,
which sends other control frames than the server's grpc-go: two
WINDOW_UPDATEs an ack where grpc-go sends, for a request read while no BDP
PING of its is out, one connection WINDOW_UPDATE and a PING (which the
acks thread answers). This drives :func:`bench.publish_cg.drive` (one
publish at a time, a pause after each: one ack a read, as at 1,000 msgs/s)
against a ``LocalServer`` started natively (valgrind does not trace child
processes unless told to), so that under callgrind only the client runs
instrumented. Count the acks thread's instructions for two ``--count`` s
and take the difference per ack::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --separate-threads=yes \\
        python -m bench.acks_cg --count 400 [--gc-off]

Two runs of one count differ by a few thousand instructions an ack: the
frames each read brings vary with timing (a PING's answer late, a
WINDOW_UPDATE read apart), and a young collection runs on whichever thread's
allocation sets it off (``--gc-off`` leaves those out). Compare medians of
several runs. :mod:`bench.ack_read_cg` counts the same per-read work
(feeding the reader, resolving the acks) in one thread, the same every run.
The acks thread is the thread other than the main one that calls
``poll`` the most. Needs ``LIFTBRIDGE_SERVER_BIN`` and ``NATS_SERVER_BIN``
as the integration tests do.
"""

from __future__ import annotations

import argparse
import gc

from bench.publish_cg import STREAM, drive
from liftbridge.testing import LocalServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--handler", action="store_true", help="future=False and a handler")
    parser.add_argument(
        "--gc-off", action="store_true", help="no garbage collection (whose thread varies)"
    )
    args = parser.parse_args()
    if args.gc_off:
        gc.disable()
    with LocalServer(log_level="warn") as server:
        import liftbridge

        with liftbridge.Client(server.addresses, connect_timeout=300.0) as admin:
            admin.create_stream(STREAM, subject=STREAM)
        host, _, port = server.addresses[0].rpartition(":")
        assert host == "127.0.0.1", server.addresses
        drive(int(port), args.count, handler=args.handler, own=False)


if __name__ == "__main__":
    main()
