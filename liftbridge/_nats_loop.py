"""One nats-py connection behind a synchronous API: the ``liftbridge-nats-loop`` thread.

nats-py is an asyncio client. :class:`NatsLoop` runs its event loop on a
thread of its own and owns the connection there: it connects (with the
reasons nats-py gave when it cannot), subscribes to the ack inbox, writes
whatever envelopes publishers queued in one go (nats-py coalesces them into
one socket write), collects the ack payloads it reads into batches, and
closes the connection with a bound. What it reads or fails to write goes to
its owner through one ``deliver`` function, called on the loop thread (the
owner settles ack batches there and queues the rest for its acks thread);
it never runs user code.

Only this module imports nats-py, and only when a publisher is created.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from liftbridge._errors import MissingDependencyError, UnavailableError
from liftbridge._nats_info import DEFAULT_PORT, server_info

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 5.0
"""Seconds the connection's close, then the loop thread's join, may take."""


def import_nats() -> Any:
    """Imports nats-py, or explains how to install it."""
    try:
        import nats
    except ImportError as e:
        raise MissingDependencyError(
            "publishing over NATS needs the nats-py package: pip install 'liftbridge[nats]'"
        ) from e
    return nats


def check_tls_required(url: str, timeout: float) -> None:
    """Refuses a server that does not require TLS when TLS is asked for.

    nats-py upgrades a connection to TLS only when the server's INFO says
    ``tls_required``: against a server that merely allows TLS it would go on
    in plain text, credentials included. This reads that INFO first.

    Raises:
        UnavailableError: the server cannot be reached or does not require TLS.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or DEFAULT_PORT
    info = server_info(host, port, timeout)
    if not info.get("tls_required"):
        raise UnavailableError(
            f"TLS was asked for, but the NATS server at {host}:{port} does not require it "
            "(nats-py would connect in plain text): enable TLS on the server"
        )


class NatsLoop:
    """A NATS connection on the ``liftbridge-nats-loop`` thread. Thread-safe.

    Args:
        where: ``host:port`` for messages (never the credentials).
        inbox: the subject acks arrive on.
        deliver: takes, on the loop thread, a list of raw ack payloads, or
            ``(entry, error)`` for an envelope NATS did not take (``entry``
            as given to :meth:`send`). It must not block nor run user code.
        on_closed: called on the loop thread when the connection closed:
            after :meth:`close`, or because NATS gave up reconnecting.
    """

    def __init__(
        self,
        where: str,
        inbox: str,
        deliver: Callable[[object], None],
        on_closed: Callable[[], None],
    ) -> None:
        self._where = where
        self._inbox = inbox
        self._deliver = deliver
        self._on_closed_cb = on_closed
        self._closing = False  # close() began: a disconnect is ours
        self._nc: Any = None
        self._writer: asyncio.Event | None = None
        self._writer_task: asyncio.Task[None] | None = None
        # The distinct errors nats-py reported while connecting (loop thread only).
        self._connect_errors: dict[str, None] = {}
        # Envelopes handed to the loop thread: appended by publishers, emptied
        # by the loop (deque appends and pops are atomic).
        self._outbox: collections.deque[tuple[str, bytes, object]] = collections.deque()
        self._outbox_lock = threading.Lock()  # guards _writer_awake and appends to _outbox
        self._writer_awake = False  # the writer drains the outbox, or a wake-up is on its way
        self._acks: list[bytes] = []  # raw ack payloads read in this loop turn (loop thread)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="liftbridge-nats-loop", daemon=True)

    # ------------------------------------------------------ caller's thread --

    def connect(self, nats: Any, options: dict[str, Any], connect_timeout: float) -> None:
        """Starts the loop thread and connects (nats-py ``connect`` options,
        without the callbacks, which are this object's).

        Raises:
            UnavailableError: no connection or no inbox subscription within
                twice ``connect_timeout`` (the loop is stopped again).
        """
        self._thread.start()
        options = {
            **options,
            "connect_timeout": connect_timeout,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
            "closed_cb": self._on_closed,
        }
        if (
            "skip_subject_validation"
            in inspect.signature(nats.aio.client.Client.connect).parameters
        ):
            # Every subject published to is a partition subject from the
            # server's metadata (checked once, when the publisher resolves it):
            # nats-py's check on every publish is spared.
            options["skip_subject_validation"] = True
        # The connect gives up by itself after 2 x connect_timeout; the margin
        # only covers a loop thread that is late.
        connecting = asyncio.run_coroutine_threadsafe(
            self._connect(nats, options, connect_timeout * 2), self._loop
        )
        try:
            connecting.result(connect_timeout * 2 + CLOSE_TIMEOUT)
        except BaseException:
            connecting.cancel()
            self.close()
            raise

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts (after :meth:`connect`)."""
        return int(self._nc.max_payload)

    def send(self, subject: str, envelope: bytes, entry: object) -> None:
        """Queues an envelope for the writer (woken if asleep). An envelope
        NATS does not take is delivered back as ``(entry, error)``, unless
        ``entry`` is None (then it is logged)."""
        with self._outbox_lock:
            self._outbox.append((subject, envelope, entry))
            wake = not self._writer_awake
            self._writer_awake = True
        if wake and self._writer is not None:
            # RuntimeError: the loop has stopped; the owner fails what is pending.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._writer.set)

    def drop_unsent(self) -> None:
        """Forgets envelopes not written yet (closing: the owner fails them)."""
        self._outbox.clear()

    def flush(self, timeout: float | None) -> None:
        """Waits (up to ``timeout``) until what was queued is written and the
        server has seen it; gives up quietly once closed."""
        if not self._loop.is_running() or self._closing:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._flush(timeout), self._loop).result(timeout)

    def close(self) -> None:
        """Closes the connection on the loop, stops the loop and joins its
        thread (each bounded by ``CLOSE_TIMEOUT``). Idempotent; safe from the
        loop thread (it is then not joined)."""
        self._closing = True
        if self._loop.is_running():
            try:
                closing = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
                closing.result(CLOSE_TIMEOUT)
            except Exception as e:
                logger.warning("closing the NATS connection to %s: %r", self._where, e)
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread.ident is not None and threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_TIMEOUT)
            if self._thread.is_alive():
                logger.warning("liftbridge-nats-loop did not stop within %.0fs", CLOSE_TIMEOUT)

    # ------------------------------------------------------------ loop thread --

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        except Exception:  # the loop must not die silently
            logger.exception("liftbridge-nats-loop failed")
        finally:
            with contextlib.suppress(Exception):
                self._loop.close()

    async def _connect(self, nats: Any, options: dict[str, Any], timeout: float) -> None:
        try:
            nc = await asyncio.wait_for(nats.connect(**options), timeout)
        except Exception as e:  # TimeoutError included
            # nats-py retries a refused login until the timeout: say why it failed.
            causes = ", ".join(self._connect_errors) or repr(e)
            raise UnavailableError(
                f"cannot connect to the NATS server at {self._where} within {timeout:g}s: {causes}"
            ) from e
        try:
            await nc.subscribe(self._inbox, cb=self._on_ack)
            await nc.flush(options["connect_timeout"])
        except Exception as e:
            with contextlib.suppress(Exception):
                await nc.close()
            raise UnavailableError(
                f"cannot subscribe to the ack inbox on {self._where}: {e!r}"
            ) from e
        self._nc = nc
        self._writer = asyncio.Event()
        self._writer_task = asyncio.get_running_loop().create_task(
            self._write_forever(nc, self._writer)
        )

    async def _write_forever(self, nc: Any, writer: asyncio.Event) -> None:
        """Writes the outbox to NATS each time publishers wake it up."""
        outbox = self._outbox
        while True:
            await writer.wait()
            writer.clear()
            while True:
                while outbox:
                    subject, envelope, entry = outbox.popleft()
                    try:
                        await nc.publish(subject, envelope)
                    except Exception as e:  # closed, or the reconnect buffer is full
                        if entry is not None:
                            self._deliver((entry, e))
                        else:
                            logger.warning(
                                "dropped an AckPolicy.NONE publish on %s: %r", subject, e
                            )
                # Going to sleep and appending exclude each other: an append
                # either lands before this look or finds the writer asleep and
                # wakes it.
                with self._outbox_lock:
                    if not outbox:
                        self._writer_awake = False
                        break

    async def _flush(self, timeout: float | None) -> None:
        assert self._writer is not None
        self._writer.set()
        await asyncio.sleep(0)  # let the writer take what is in the outbox first
        await self._nc.flush(timeout or 60.0)

    async def _on_ack(self, msg: Any) -> None:
        """Collects an ack payload; the owner gets them in batches."""
        acks = self._acks
        acks.append(msg.data)
        if len(acks) == 1:
            self._loop.call_soon(self._hand_acks_over)

    def _hand_acks_over(self) -> None:
        acks, self._acks = self._acks, []
        self._deliver(acks)

    async def _on_error(self, error: Exception) -> None:
        if self._nc is None and len(self._connect_errors) < 5:
            self._connect_errors[repr(error)] = None
        logger.warning("NATS connection to %s: %r", self._where, error)

    async def _on_disconnected(self) -> None:
        if not self._closing:  # else close() is what disconnected it
            logger.warning("NATS connection to %s lost; reconnecting", self._where)

    async def _on_reconnected(self) -> None:
        logger.info("NATS connection to %s re-established", self._where)

    async def _on_closed(self) -> None:
        self._on_closed_cb()

    async def _shutdown(self) -> None:
        writer = self._writer_task
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        nc = self._nc
        if nc is not None and not nc.is_closed:
            await nc.close()
