"""A pinned consumer-group member in a child process of its own, so a fault
row or a test can freeze (SIGSTOP) and thaw it while watching what it prints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent

_PINNED_MEMBER = textwrap.dedent(
    """
    import sys, threading, liftbridge
    address, group = sys.argv[1:3]
    client = liftbridge.Client(address)
    def handle(message, error):
        if message is not None:
            print("offset", message.offset, flush=True)
    def on_pin(event):
        print("pin", event.kind.value, event.reason.value if event.reason else "-", flush=True)
    consumer = client.create_consumer(group, pinned=True, on_pin=on_pin, auto_checkpoint=0.2)
    consumer.subscribe(group, handle)
    threading.Event().wait()
    """
)


class PinnedMemberProcess:
    """A pinned group member in a child process of its own, so it can be
    frozen (SIGSTOP) and thawed; :attr:`lines` collects what it prints, split
    in words: ``offset N`` per message handled, ``pin KIND REASON`` per pin
    event. Used by the ``pinned-freeze`` row and the groups test suite."""

    def __init__(self, address: str, group: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _PINNED_MEMBER, address, group],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(_ROOT)),
        )
        self.lines: list[list[str]] = []
        self._reader = threading.Thread(target=self._read, name="pinned-child-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.split())

    def stop(self) -> None:
        """Thaws and kills the child, and waits for it and its reader."""
        self.process.send_signal(signal.SIGCONT)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self._reader.join(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
