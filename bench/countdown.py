"""An ack handler that counts outcomes down, for the bench's handler rows.

The Go driver's ``PublishAsync`` handler counts a ``sync.WaitGroup`` down and
the driver waits once, at the end. :class:`CountDown` does the same for the
SDK's rows with an ack handler and ``future=False``, so that those rows time
the SDK and not the bench's waiting: a ``threading.Semaphore`` released per ack
and acquired per publish cost about 2 µs a message (bench/README_PERFORMANCE.md,
"The handler row's own waiting").
"""

from __future__ import annotations

import threading

import liftbridge


class CountDown:
    """``count`` outcomes expected; :attr:`on_ack` is the handler to pass to
    ``publish_async``. Ack handlers run one at a time on
    ``liftbridge-callbacks``, so the count needs no lock; the waiting thread is
    woken once, by the last outcome.

    Attributes:
        left: outcomes not heard yet.
        failures: the errors heard, in order.
    """

    def __init__(self, count: int) -> None:
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self.left = count
        self.failures: list[BaseException] = []
        heard = self._heard = threading.Event()
        if not count:
            heard.set()
        failures = self.failures

        def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
            if error is not None:
                failures.append(error)
            self.left -= 1
            if not self.left:
                heard.set()

        self.on_ack = on_ack

    def wait(self, timeout: float) -> bool:
        """Whether every outcome came within ``timeout`` seconds."""
        return self._heard.wait(timeout)
