"""A batch worker on the pull consumer: take what is waiting, in batches,
commit the position, exit; the next run resumes after it. Then a direct read
of the first message by offset.

    python examples/pull_worker.py HOST:PORT STREAM [--batch N]
"""

from __future__ import annotations

import argparse

import liftbridge

CURSOR_ID = "pull-worker-example"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("address")
    parser.add_argument("stream")
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    with liftbridge.Client(args.address) as client:
        start = liftbridge.FromCursor(CURSOR_ID)  # after the last commit, else the oldest
        with client.pull(args.stream, start=start, stop=liftbridge.StopPosition.LATEST) as worker:
            while batch := worker.fetch(args.batch, timeout=5):
                offsets = [m.offset for m in batch]
                print(f"batch of {len(batch)}: offsets {offsets[0]}..{offsets[-1]}")
                worker.commit(CURSOR_ID)  # the batch is done: remember where we are
            print(f"position {worker.position()}")
        first = client.get(args.stream, 0)
        print(f"offset 0 holds {first.value.decode()!r}")


if __name__ == "__main__":
    main()
