"""What a publish does when its partition's leader is found down: the one
policy of the client's two gRPC publish paths (the shared PublishAsync stream,
:mod:`liftbridge._publish._publisher`, and the per-thread lanes,
:mod:`liftbridge._publish._lanes`).

A publish whose partition leader is another broker (the stream's broker
forwards it over NATS) gets no ack if that leader dies, while its stream
stays healthy. The router watches every leader publishes go to
(:mod:`liftbridge._core._liveness`) and tells its listeners, on
``liftbridge-broker-watch``, when one is found down. Then:

- a publish sent while that leader was believed up can no longer get its
  ack: it fails at once with :class:`LeaderLostError`
  (:func:`leader_lost`), on ``liftbridge-ack-timer``;
- a publish about to be sent to a leader known down is held back until fresh
  metadata names a live leader that says it serves the partition
  (:func:`live_leader`, used by the lanes before they send);
- a publish that went out to a leader already known down (the shared stream
  sends without waiting) is decided by ``liftbridge-leader-check``
  (:class:`LeaderCheck`): fresh metadata still naming the dead broker means
  no one took it, and it fails; a new leader may have taken it, and it waits
  for its ack.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from liftbridge._core._router import Deadline, Router
from liftbridge._errors import DeadlineExceededError, LeaderLostError, LiftbridgeError
from liftbridge._publish._request_bytes import Request
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

_REFRESH = 1.0
"""The deadline of one metadata refresh or leader question."""
_RECHECK = 0.1
"""Seconds between metadata checks while a publish waits for a live leader."""
_CHECK_EVERY = 0.1
"""Seconds between metadata checks while publishes sent to a leader known down await acks."""
_CHECK_IDLE = 5.0
"""Seconds liftbridge-leader-check idles between looks (a suspect publish wakes it)."""


def leader_lost(request: Request, address: str, correlation_id: str) -> LeaderLostError:
    """The error of a publish whose partition leader at ``address`` went down
    before its ack came."""
    where = f"{request.stream!r} partition {request.partition}"
    return LeaderLostError(
        f"the leader of {where} ({address}) went down before the ack of publish "
        f"{correlation_id} arrived; the message may or may not have been stored",
        address,
    )


def leads(router: Router, address: str, request: Request, due: float) -> bool:
    """Whether the broker the metadata names as the new leader says so
    itself: the cluster's metadata can name it before it serves the
    partition, and a publish forwarded to it then would be dropped."""
    ask = api_pb2.FetchPartitionMetadataRequest(stream=request.stream, partition=request.partition)
    try:
        router.invoke(
            address,
            "FetchPartitionMetadata",
            ask,
            min(_REFRESH, max(0.05, due - time.monotonic())),
        )
    except LiftbridgeError as e:
        _log.debug("the new leader %s does not serve the partition yet: %s", address, e)
        return False
    # It answered: no longer passed over. A metadata call that timed out while
    # the cluster failed over (a broker waits on its dead peer before it
    # answers one) marked it suspect, and a suspect leader is held back again.
    router.answered(address)
    return True


def live_leader(router: Router, request: Request, down: str, due: float) -> str:
    """The partition's leader once fresh metadata names one not known to be
    down, asked for every ``_RECHECK`` seconds until ``due``. A publish sent
    to the old leader could only wait out its ack timeout, so it is held
    back meanwhile: it goes out as soon as a new leader is known.

    Raises:
        DeadlineExceededError: no live leader by ``due`` (the publish was not sent).
    """
    where = f"{request.stream!r} partition {request.partition}"
    while True:
        remaining = due - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceededError(
                f"the leader of {where} ({down}) is down and no other broker took over "
                "in time; the publish was not sent"
            )
        try:
            router.refresh(Deadline(min(_REFRESH, remaining)), shared=False)
        except LiftbridgeError as e:
            _log.debug("no metadata while the leader of %s is down: %s", where, e)
        leader = router.leader_address(request.stream, request.partition)
        # A suspect leader (even ``down`` itself) is asked rather than passed
        # over: suspicion only says one call to it failed, and its own answer
        # that it serves the partition is the better evidence.
        if (
            leader is not None
            and not router.broker_down(leader)
            and leads(router, leader, request, due)
        ):
            return leader
        time.sleep(min(_RECHECK, max(0.0, due - time.monotonic())))


class Suspect(Protocol):
    """A publish sent to a partition whose cached leader was known down."""

    request: Request
    leader: str | None  # the address its ack would come from
    suspect: bool  # still undecided


_S = TypeVar("_S", bound=Suspect)


class LeaderCheck(Generic[_S]):
    """The ``liftbridge-leader-check`` thread: decides the publishes sent to a
    partition whose cached leader was already known down, until stopped.

    Args:
        router: the client's router.
        suspects: the undecided publishes now (called on this thread).
        lost: fails a publish whose leader is gone, with its address.
    """

    def __init__(
        self,
        router: Router,
        suspects: Callable[[], Sequence[_S]],
        lost: Callable[[_S, str], None],
    ) -> None:
        self._router = router
        self._suspects = suspects
        self._lost = lost
        self._lock = threading.Lock()  # guards _started
        self._started = False
        self._stop = threading.Event()
        # Set when a publish is sent to a partition whose leader is known to be down.
        self._wake = threading.Event()
        self.thread = threading.Thread(
            target=self._loop, name="liftbridge-leader-check", daemon=True
        )

    def start(self) -> None:
        """Starts the thread (on the first broker found down); idempotent, and
        never after :meth:`stop`."""
        with self._lock:
            start = not self._started and not self._stop.is_set()
            self._started = True
        if start:
            self.thread.start()

    def wake(self) -> None:
        """A suspect publish was sent: look now."""
        self._wake.set()

    def stop(self) -> None:
        """Tells the thread to end (the owner joins :attr:`thread`)."""
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self._decide()
            except Exception:  # never die silently: log and check again later
                _log.exception("the leader check failed; it goes on")
                busy = True
            if not busy:
                self._wake.wait(_CHECK_IDLE)
            self._wake.clear()
            self._stop.wait(_CHECK_EVERY)

    def _decide(self) -> bool:
        """Fresh metadata, asked for after the suspect publishes were sent,
        decides them: if it still names the dead broker (or no leader) for
        the partition, no other broker was leading it when they were sent,
        and their acks can never come: they fail with LeaderLostError. If it
        names a new leader, it may have taken them: they wait for their ack.

        Returns:
            True while suspect publishes remain to be decided.
        """
        waiting = []
        for pending in self._suspects():
            assert pending.leader is not None
            if self._router.broker_down(pending.leader):
                waiting.append(pending)
            else:
                pending.suspect = False  # the leader is back: its ack may come
        if not waiting:
            return False
        try:
            metadata = self._router.refresh(Deadline(_REFRESH), shared=False)
        except LiftbridgeError as e:
            _log.debug("leader check: no metadata (%s); trying again", e)
            return True
        lost = 0
        for pending in waiting:
            if pending.leader is None or not self._router.broker_down(pending.leader):
                pending.suspect = False  # back up while the metadata was fetched
                continue
            request = pending.request
            info = metadata.partition(request.stream, request.partition)
            broker = metadata.broker(info.leader) if info is not None and info.leader else None
            if broker is None or broker.address == pending.leader:
                lost += 1
                self._lost(pending, pending.leader or "")
            else:
                pending.leader = broker.address  # its ack, if any, comes from there
                pending.suspect = False
        if lost:
            _log.warning("failed %d publish(es) sent to partitions whose leader is down", lost)
        return True
