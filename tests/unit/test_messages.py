"""The Message and Ack value objects: a protobuf wrapped, behaving like a frozen value."""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import pickle
import threading
import time

import pytest

import liftbridge
from liftbridge._core._acks import (
    ack_from_proto,
    ack_of_checked,
    ack_of_wire,
    ack_outcome,
    response_outcome,
)
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._messages import message_from_proto
from liftbridge._errors import naming
from liftbridge._publish._pending import Pending, claim_responses
from liftbridge_api import api_pb2
from tests.unit.wire import wire_ack


def _wire(**fields: object) -> api_pb2.Message:
    base: dict[str, object] = {
        "offset": 7,
        "value": b"payload",
        "key": b"k",
        "timestamp": 1_700_000_000_123_456_789,
        "stream": "orders",
        "partition": 2,
        "subject": "orders.2",
        "replySubject": "_INBOX.x",
        "headers": {"subject": b"orders.2", "reply": b"", "trace": b"abc"},
    }
    base.update(fields)
    return api_pb2.Message(**base)  # type: ignore[arg-type]


def test_fields_come_from_the_wire_message() -> None:
    message = message_from_proto(_wire())
    assert message.offset == 7
    assert message.value == b"payload"
    assert message.key == b"k"
    assert message.timestamp_ns == 1_700_000_000_123_456_789
    assert message.stream == "orders"
    assert message.partition == 2
    assert message.subject == "orders.2"
    assert message.reply_subject == "_INBOX.x"
    assert dict(message.headers) == {"subject": b"orders.2", "reply": b"", "trace": b"abc"}
    assert message.timestamp.year == 2023


def test_an_empty_key_reads_as_none() -> None:
    assert message_from_proto(_wire(key=b"")).key is None
    assert liftbridge.Message(offset=0, value=b"").key is None


def test_headers_are_read_only_and_a_missing_one_raises_key_error() -> None:
    message = message_from_proto(_wire())
    with pytest.raises(TypeError):
        message.headers["new"] = b"x"  # type: ignore[index]
    with pytest.raises(KeyError):
        message.headers["absent"]
    assert "absent" not in message.headers  # reading it did not add it
    assert message.headers is message.headers


def test_no_headers_is_an_empty_mapping() -> None:
    assert dict(message_from_proto(_wire(headers={})).headers) == {}


def test_a_message_cannot_be_changed() -> None:
    message = message_from_proto(_wire())
    with pytest.raises(dataclasses.FrozenInstanceError, match="offset"):
        message.offset = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del message.value
    with pytest.raises(AttributeError):
        message.extra = 1


def test_equality_hash_copy_and_pickle_are_by_value() -> None:
    wired = message_from_proto(_wire())
    built = liftbridge.Message(
        offset=7,
        value=b"payload",
        key=b"k",
        timestamp_ns=1_700_000_000_123_456_789,
        stream="orders",
        partition=2,
        subject="orders.2",
        reply_subject="_INBOX.x",
        headers={"subject": b"orders.2", "reply": b"", "trace": b"abc"},
    )
    assert wired == built and hash(wired) == hash(built)
    assert wired != message_from_proto(_wire(headers={}))
    assert wired != message_from_proto(_wire(offset=8))
    assert wired != "not a message"
    assert pickle.loads(pickle.dumps(wired)) == wired
    assert copy.deepcopy(wired) == wired and copy.copy(wired) == wired
    assert len({wired, built}) == 1


def test_repr_names_every_field() -> None:
    text = repr(message_from_proto(_wire()))
    assert text.startswith("Message(offset=7, value=b'payload', key=b'k', ")
    assert "reply_subject='_INBOX.x'" in text and "'trace': b'abc'" in text


def test_threads_reading_headers_at_once_see_equal_mappings() -> None:
    message = message_from_proto(_wire())
    seen: list[dict[str, bytes]] = []
    threads = [
        threading.Thread(target=lambda: seen.append(dict(message.headers))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 and all(s == seen[0] for s in seen)


def test_ack_fields_come_from_thewire_ack() -> None:
    ack = ack_from_proto(wire_ack())
    assert (ack.stream, ack.partition_subject, ack.message_subject) == (
        "orders",
        "orders.1",
        "orders.1",
    )
    assert (ack.offset, ack.ack_inbox, ack.correlation_id) == (42, "acks", "c-7")
    assert ack.ack_policy is liftbridge.AckPolicy.ALL
    assert (ack.reception_timestamp_ns, ack.commit_timestamp_ns) == (1_000, 2_000)
    assert ack.error is None


def test_an_ack_error_becomes_a_typed_error_and_an_unknown_policy_is_refused() -> None:
    refused = ack_from_proto(wire_ack(ackError=api_pb2.Ack.INCORRECT_OFFSET))
    assert isinstance(refused.error, liftbridge.IncorrectOffsetError)
    with pytest.raises(ValueError, match="99"):
        ack_from_proto(wire_ack(ackPolicy=99))


def _built(
    ack_policy: liftbridge.AckPolicy = liftbridge.AckPolicy.ALL, message_subject: str = "orders.1"
) -> liftbridge.Ack:
    """The Ack ``wire_ack()`` is, made by its constructor."""
    return liftbridge.Ack(
        stream="orders",
        partition_subject="orders.1",
        message_subject=message_subject,
        offset=42,
        ack_inbox="acks",
        correlation_id="c-7",
        ack_policy=ack_policy,
        reception_timestamp_ns=1_000,
        commit_timestamp_ns=2_000,
    )


def test_ack_equality_hash_copy_pickle_and_immutability() -> None:
    wired = ack_from_proto(wire_ack())
    built = _built()
    assert wired == built and hash(wired) == hash(built) and len({wired, built}) == 1
    assert wired != ack_from_proto(wire_ack(offset=41))
    assert wired != "not an ack"
    assert pickle.loads(pickle.dumps(wired)) == wired
    assert copy.deepcopy(wired) == wired
    assert repr(wired).startswith(
        "Ack(stream='orders', partition=0, partition_subject='orders.1', "
    )
    with pytest.raises(dataclasses.FrozenInstanceError, match="offset"):
        wired.offset = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del wired.stream


_ACK_FIELDS = (
    "stream",
    "partition",
    "partition_subject",
    "message_subject",
    "offset",
    "ack_inbox",
    "correlation_id",
    "ack_policy",
    "reception_timestamp_ns",
    "commit_timestamp_ns",
    "reception_timestamp",
    "commit_timestamp",
    "error",
)


def _of_wire(**fields: object) -> liftbridge.Ack:
    return ack_of_wire(wire_ack(**fields).SerializeToString())


def test_an_ack_kept_as_its_bytes_reads_compares_and_pickles_as_one_kept_as_its_protobuf() -> None:
    wired = ack_from_proto(wire_ack(msgSubject="orders.1.3"))
    for name in _ACK_FIELDS:  # each field the first one read: every one parses on its own
        assert getattr(_of_wire(msgSubject="orders.1.3"), name) == getattr(wired, name), name
    lazy = _of_wire(msgSubject="orders.1.3")
    assert repr(lazy) == repr(wired) and lazy._repr_html_() == wired._repr_html_()
    lazy = _of_wire(msgSubject="orders.1.3")
    assert lazy == wired and wired == lazy and hash(lazy) == hash(wired)
    assert _of_wire(offset=41) != wired and _of_wire() != "not an ack"
    for copied in (pickle.loads(pickle.dumps(_of_wire())), copy.copy(_of_wire())):
        assert copied == ack_from_proto(wire_ack()) and type(copied) is liftbridge.Ack
    lazy = _of_wire()
    with pytest.raises(dataclasses.FrozenInstanceError, match="offset"):
        lazy.offset = 1  # type: ignore[misc]
    with pytest.raises(AttributeError, match="'Ack' object has no attribute 'ofset'"):
        lazy.ofset  # type: ignore[attr-defined]  # noqa: B018
    assert lazy.offset == 42 and lazy.offset == 42  # parsed on the first read, kept


def test_threads_reading_an_ack_kept_as_its_bytes_at_once_see_equal_fields() -> None:
    lazy = _of_wire()
    start = threading.Barrier(8)
    seen: list[tuple[object, ...]] = []

    def read() -> None:
        start.wait()
        seen.append((lazy.offset, lazy.correlation_id, lazy.partition))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == [(42, "c-7", 0)] * 8


def test_an_unknown_ack_error_code_is_a_server_error_not_a_value_error() -> None:
    refused = ack_from_proto(wire_ack(ackError=99))
    assert isinstance(refused.error, liftbridge.ServerError)
    assert refused.error.code == "UNKNOWN_99"


@pytest.mark.parametrize(
    ("partition_subject", "message_subject", "partition"),
    [
        ("orders", "orders", 0),
        ("orders", "orders.1", 1),
        ("orders", "orders.12", 12),
        ("a.b", "a.b.3", 3),
        ("a.*", "a.x", 0),  # a wildcard stream: the token is not a partition
        ("a.*", "a.7", 0),
        ("a.*", "a.x.2", 2),
        ("a.>", "a.b.c.4", 0),  # '>' takes one partition only
        ("orders", "orders.x", 0),
        ("orders", "", 0),
    ],
)
def test_ack_partition_comes_from_the_subjects(
    partition_subject: str, message_subject: str, partition: int
) -> None:
    ack = liftbridge.Ack(
        stream="s",
        partition_subject=partition_subject,
        message_subject=message_subject,
        offset=0,
        ack_inbox="",
        correlation_id="c",
        ack_policy=liftbridge.AckPolicy.LEADER,
        reception_timestamp_ns=0,
        commit_timestamp_ns=0,
    )
    assert ack.partition == partition
    assert f"partition={partition}," in repr(ack)


def _responses() -> list[api_pb2.PublishResponse]:
    """One of each kind of PublishAsync response, plain acks between them."""
    error = api_pb2.PublishAsyncError(code=api_pb2.PublishAsyncError.NOT_FOUND, message="no such")
    return [
        api_pb2.PublishResponse(ack=wire_ack(correlationId="a"), correlationId="a"),
        api_pb2.PublishResponse(asyncError=error, correlationId="b"),
        api_pb2.PublishResponse(ack=wire_ack(ackPolicy=api_pb2.LEADER), correlationId="c"),
        api_pb2.PublishResponse(
            ack=wire_ack(ackError=api_pb2.Ack.INCORRECT_OFFSET), correlationId="d"
        ),
        api_pb2.PublishResponse(ack=wire_ack(ackPolicy=99), correlationId="e"),
        api_pb2.PublishResponse(ack=wire_ack(correlationId="f")),  # only the ack names it
        api_pb2.PublishResponse(
            ack=wire_ack(ackError=api_pb2.Ack.TOO_LARGE), asyncError=error, correlationId="g"
        ),
        api_pb2.PublishResponse(ack=wire_ack(correlationId="h"), correlationId="h"),
        api_pb2.PublishResponse(ack=wire_ack(ackPolicy=api_pb2.NONE), correlationId="n"),
        api_pb2.PublishResponse(ack=wire_ack(correlationId="u"), correlationId="u"),  # unknown
        api_pb2.PublishResponse(asyncError=error, correlationId="v"),  # unknown
    ]


def _handler(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
    raise AssertionError("not called: claim_responses only hands the handler on")


def _pending(correlation_id: str, *, expects_ack: bool = True) -> Pending:
    request = api_pb2.PublishRequest(stream="orders", partition=3, correlationId=correlation_id)
    return Pending(correlation_id, request, concurrent.futures.Future(), _handler, expects_ack)


def test_a_run_of_responses_has_each_response_s_own_outcome_in_order() -> None:
    """The acks thread reads a plain ack its own quicker way (claim_responses):
    each response's outcome is still response_outcome's, its error naming the
    publish's stream, and its publish is claimed."""
    table = {cid: _pending(cid, expects_ack=cid != "n") for cid in "abcdefghn"}
    entries = dict(table)
    futures = {cid: pending.future for cid, pending in table.items()}
    settled, members, unknown = claim_responses(_responses(), table.pop)
    assert table == {} and members == []
    expected = [response_outcome(response) for response in _responses()]
    assert [cid for cid, _, _ in expected] == [*"abcdefghn", "u", "v"]
    assert [(cid, type(error)) for cid, error in unknown] == [
        ("u", type(None)),
        ("v", liftbridge.NoSuchPartitionError),
    ]
    assert str(unknown[1][1]) == str(expected[10][2])  # not named: no publish says which
    assert [future for future, _, _, _ in settled] == list(futures.values())
    for (future, handler, ack, error), (cid, ack1, error1) in zip(
        settled, expected[:9], strict=True
    ):
        assert future is futures[cid] and entries[cid].done and entries[cid].future is None
        assert handler is (None if cid == "n" else _handler), cid
        assert ack == ack1, cid
        assert (ack is None) == (error is not None), cid
        named = None if error1 is None else naming(error1, "orders", 3)
        assert type(error) is type(named) and str(error) == str(named), cid
    acks = [ack for _, _, ack, _ in settled]
    assert acks[0] is not None and acks[0].ack_policy is liftbridge.AckPolicy.ALL
    assert acks[2] is not None and acks[2].ack_policy is liftbridge.AckPolicy.LEADER
    assert acks[8] is not None and acks[8].ack_policy is liftbridge.AckPolicy.NONE
    assert isinstance(settled[1][3], liftbridge.NoSuchPartitionError)
    assert "'orders'" in str(settled[1][3])
    assert isinstance(settled[3][3], liftbridge.IncorrectOffsetError)
    assert isinstance(settled[4][3], liftbridge.ServerError)
    assert acks[5] is not None and acks[5].correlation_id == "f"


def test_with_wire_acks_a_future_alone_is_resolved_with_the_protobuf_and_reads_the_ack() -> None:
    """The publisher's way (wire_acks): the acks thread makes no Ack for a
    plain ack whose publish has no ack handler; its Future (made on read)
    gets the response's protobuf and reads as response_outcome's Ack. A
    publish with a handler, and every other response, still get an Ack."""
    runner = CallbackRunner()
    heard: list[object] = []
    try:
        new_future = runner.future_made_on_read(api_pb2.Ack, ack_of_checked)
        table = {
            cid: Pending(
                cid,
                api_pb2.PublishRequest(stream="orders", partition=3, correlationId=cid),
                new_future(),
                (lambda ack, error: heard.append(ack)) if cid == "h" else None,
                True,
            )
            for cid in "abcdefghn"
        }
        futures = {cid: pending.future for cid, pending in table.items()}
        settled, members, unknown = claim_responses(_responses(), table.pop, wire_acks=True)
        assert table == {} and members == [] and len(unknown) == 2
        raw = {
            cid
            for cid, (_, _, result, _) in zip("abcdefghn", settled, strict=True)
            if isinstance(result, api_pb2.Ack)
        }
        assert raw == {"a", "c", "n"}
        runner.settle_run(settled)
        expected = {cid: outcome for cid, *outcome in map(response_outcome, _responses())}
        for cid, future in futures.items():
            assert future is not None
            ack, error = expected[cid]
            if error is None:
                assert isinstance(future.result(timeout=0), liftbridge.Ack), cid
                assert future.result(timeout=0) == ack, cid
                assert future.result(timeout=0) is future.result(timeout=0), cid
            else:
                assert type(future.exception(timeout=0)) is type(error), cid
    finally:
        runner.close(time.monotonic() + 10.0)
    assert len(heard) == 1 and isinstance(heard[0], liftbridge.Ack) and heard[0] == expected["h"][0]


@pytest.mark.parametrize("policy", list(liftbridge.AckPolicy))
def test_an_ack_reads_the_same_whichever_way_it_was_made(policy: liftbridge.AckPolicy) -> None:
    """The acks paths write only the protobuf (or bytes) into an Ack: its policy
    is read from the protobuf, its error is None. Every way of making one reads
    alike, field by field, compares, hashes, prints and pickles alike."""
    fields = {"ackPolicy": policy.value, "msgSubject": "orders.1.3"}
    response = api_pb2.PublishResponse(ack=wire_ack(**fields), correlationId="c-7")
    made = {
        "run": claim_responses([response], {"c-7": _pending("c-7")}.pop)[0][0][2],
        "response": response_outcome(response)[1],
        "ack_outcome": ack_outcome(wire_ack(**fields))[0],
        "from_proto": ack_from_proto(wire_ack(**fields)),
        "of_wire": ack_of_wire(wire_ack(**fields).SerializeToString()),
        "init": _built(policy, message_subject="orders.1.3"),
    }
    expected = {name: getattr(made["init"], name) for name in (*_ACK_FIELDS, "partition")}
    assert expected["ack_policy"] is policy and expected["error"] is None
    for way, ack in made.items():
        assert ack is not None, way
        for name, value in expected.items():
            assert getattr(ack, name) == value, (way, name)
        assert ack.ack_policy is policy and ack.error is None, way
        assert ack == made["init"] and hash(ack) == hash(made["init"]), way
        assert repr(ack) == repr(made["init"]), way
        copied = pickle.loads(pickle.dumps(ack))
        assert copied == ack and copied.error is None and type(copied) is liftbridge.Ack, way


def test_an_ack_made_with_an_error_keeps_it_through_a_copy_and_a_pickle() -> None:
    refused = ack_from_proto(wire_ack(ackError=api_pb2.Ack.INCORRECT_OFFSET))
    for copied in (pickle.loads(pickle.dumps(refused)), copy.copy(refused)):
        assert isinstance(copied.error, liftbridge.IncorrectOffsetError)
        assert str(copied.error) == str(refused.error) and copied.offset == refused.offset
    assert refused != ack_from_proto(wire_ack())  # the error is a field: it tells them apart
