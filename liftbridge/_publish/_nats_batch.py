"""A ``publish_many_async`` batch through NATS: the
:class:`~liftbridge._publish._nats_stream.NatsStreamPublisher`'s batch path.

The options are checked and the partition's subject and leader looked up
once per batch (per message only with a ``partitioner``, which sees each
value); every message's ``PUB`` frame is built in one loop before anything
is sent (the commonest publish as one format operation,
:class:`~liftbridge._publish._bytes.PlainFrames`), so bad input sends
nothing. Then the window admits the batch a part at a time
(:meth:`~liftbridge._publish._nats_window.AckWindow.admit_some`: as many as
it has room for, one round of its lock), and each part's frames go to the
I/O thread, which writes them with whatever else is queued, many per socket
write. Each message's outcome settles its
:class:`~liftbridge._publish._batch.Batch` on the thread that has it (acks on
``liftbridge-nats-io``), no handler call per message.
"""

from __future__ import annotations

from collections.abc import Mapping

from liftbridge._core import _validate
from liftbridge._core._acks import AckPolicy
from liftbridge._core._nats_connection import NatsConnection, pub_prefix
from liftbridge._core._router import Router
from liftbridge._core._validate import BytesLike
from liftbridge._errors import LiftbridgeError
from liftbridge._publish._batch import Batch, BatchMethods, correlation_ids
from liftbridge._publish._bytes import WIRE_POLICIES, PlainFrames, envelope_frame
from liftbridge._publish._nats_pending import Pending
from liftbridge._publish._nats_subjects import Subjects
from liftbridge._publish._nats_window import AckWindow
from liftbridge._publish._options import StreamPublishOptions


class NatsBatchMethods(BatchMethods):
    """``publish_many_async`` for the NATS stream publisher (whose state it
    reads: its settings, router, subjects, frames, window and connection)."""

    _ack_timeout: float
    _router: Router
    _subjects: Subjects
    _plain: PlainFrames
    _plain_limit: int
    _max_payload: int
    _inbox: str
    _inbox_field: bytes
    _crc: bool
    _window: AckWindow
    _nats: NatsConnection

    def _envelope_frame(
        self,
        prefix: bytes,
        value: bytes,
        key: bytes | None,
        headers: Mapping[str, BytesLike] | None,
        correlation_id: str,
        ack_policy: AckPolicy,
        expected_offset: int | None,
    ) -> bytes:
        """The PUB frame of any publish (:func:`envelope_frame`) with this
        publisher's ack inbox, CRC setting and the server's ``max_payload``."""
        return envelope_frame(
            prefix,
            value,
            key,
            headers,
            correlation_id,
            ack_policy,
            expected_offset,
            inbox=self._inbox,
            inbox_field=self._inbox_field,
            crc=self._crc,
            max_payload=self._max_payload,
        )

    def _publish_batch(
        self,
        stream: str,
        values: list[bytes],
        ack_policy: AckPolicy,
        options: StreamPublishOptions,
        batch: Batch,
    ) -> None:
        timeout = options.get("timeout")
        timeout = (
            self._ack_timeout if timeout is None else _validate.seconds(timeout, arg="timeout")
        )
        key = options.get("key")
        if key is not None:
            key = _validate.data(key, arg="key")
        headers = options.get("headers")
        if headers is not None:
            headers = _validate.headers(headers)
        expected_offset = options.get("expected_offset")
        if expected_offset is not None:
            _validate.positive_int(expected_offset, arg="expected_offset", minimum=0)
        partition = options.get("partition")
        partitioner = options.get("partitioner")
        each = partitioner is not None and partition is None  # a partition per value
        if partition is None and partitioner is None and not key:
            _, subject, leader, prefix = self._subjects.first_subject(stream, values[0])
            leader = leader or self._router.leader_address(stream, 0)
        else:
            _validate.stream_name(stream)
            subject, chosen = self._subjects.subject(stream, key, values[0], partition, partitioner)
            leader = self._router.leader_address(stream, chosen)
            prefix = pub_prefix(subject)
        leaders = {subject: (leader, prefix)}
        ids = correlation_ids(len(values))
        plain = not key and not headers and expected_offset is None and not self._crc
        wire, limit, frame_of = WIRE_POLICIES[ack_policy], self._plain_limit, self._plain.frame
        entries: list[Pending] = []
        frames: list[tuple[str, bytes, object]] = []  # as the I/O thread takes them
        for index, value in enumerate(values):
            correlation_id = ids[index]
            if each and index:
                subject, chosen = self._subjects.subject(stream, key, value, None, partitioner)
                if subject not in leaders:
                    leaders[subject] = (
                        self._router.leader_address(stream, chosen),
                        pub_prefix(subject),
                    )
                leader, prefix = leaders[subject]
            if plain and 0 < len(value) <= limit:
                frame = frame_of(prefix, value, correlation_id.encode(), wire)
            else:
                frame = self._envelope_frame(
                    prefix, value, key, headers, correlation_id, ack_policy, expected_offset
                )
            entry = Pending(
                correlation_id, None, None, timeout, subject, 0.0, 0, leader, batch, index
            )
            entries.append(entry)
            frames.append((subject, frame, entry))
        start, count = 0, len(entries)
        while start < count:
            try:
                end = self._window.admit_some(entries, start, timeout)
                self._nats.send_frames(frames[start:end] if start or end < count else frames)
            except LiftbridgeError as error:  # closed, lost, or the window stayed full
                batch.fail_rest(start, error)
                raise
            except BaseException:  # an interrupt (Ctrl-C): the part from start is withdrawn
                admitted = self._window.withdraw(entries, start)
                if admitted < count:
                    withdrawn = LiftbridgeError("the batch was interrupted; the rest was not sent")
                    batch.fail_rest(admitted, withdrawn)
                raise
            start = end
