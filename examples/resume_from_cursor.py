"""The cursors seed's consumer: resume where the last run stopped.

Each run fetches the cursor, subscribes from cursor + 1, processes up to
``--batch`` messages (printing them), checkpoints the cursor after each one,
and exits. Run it twice and the second run continues where the first stopped.

    python examples/resume_from_cursor.py HOST:PORT STREAM [--batch N]
"""

from __future__ import annotations

import argparse
import threading

import liftbridge

CURSOR_ID = "resume-example"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("address")
    parser.add_argument("stream")
    parser.add_argument("--batch", type=int, default=5)
    args = parser.parse_args()

    with liftbridge.Client(args.address) as client:
        cursor = client.fetch_cursor(CURSOR_ID, args.stream, 0)
        offset = -1 if cursor is None else cursor
        print(f"cursor at {cursor}; resuming at {offset + 1}")
        processed = 0
        finished = threading.Event()
        failure: list[BaseException] = []

        def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
            nonlocal processed
            if error is not None:
                failure.append(error)
                finished.set()
                return
            assert message is not None
            if processed == args.batch:
                return  # past this run's batch: leave it for the next run
            print(f"processed offset {message.offset}: {message.value.decode()}")
            # Checkpoint: the last processed offset; the next run starts after it.
            client.set_cursor(CURSOR_ID, args.stream, message.partition, message.offset)
            processed += 1
            if processed == args.batch:
                finished.set()

        with client.subscribe(args.stream, handle, start=offset + 1):
            finished.wait(30)
        if failure:
            raise SystemExit(f"subscription failed: {failure[0]}")
        print(f"processed {processed} message(s)")


if __name__ == "__main__":
    main()
