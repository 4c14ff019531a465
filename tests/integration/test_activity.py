"""Activity-stream events from a real server decode into ActivityEvent values."""

from __future__ import annotations

import liftbridge
from liftbridge import ActivityOp


def test_stream_lifecycle_shows_up_in_the_activity_stream(
    client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    client.pause_stream(unique_name, partitions=[1], resume_all=True)
    client.set_stream_readonly(unique_name, partitions=[0])
    client.delete_stream(unique_name)

    # The server publishes activity asynchronously: read until our delete shows.
    events: list[liftbridge.ActivityEvent] = []
    with client.subscribe(
        liftbridge.ACTIVITY_STREAM, start=liftbridge.StartPosition.EARLIEST
    ) as sub:
        for message in sub:
            event = liftbridge.activity_event_from_message(message)
            events.append(event)
            if event.stream == unique_name and event.op is ActivityOp.DELETE_STREAM:
                break
    # The server publishes each event at least once: when its publish lands but
    # the Raft entry recording it does not (a busy server), it publishes the
    # event again under the same id. A repeat is the same event, next to itself.
    ids = [e.id for e in events]
    assert ids == sorted(ids)  # Raft indexes, in the log's order
    first: dict[int, liftbridge.ActivityEvent] = {}
    for event in events:
        assert first.setdefault(event.id, event) == event
    ours = [e for e in first.values() if e.stream == unique_name]
    assert [e.op for e in ours] == [
        ActivityOp.CREATE_STREAM,
        ActivityOp.PAUSE_STREAM,
        ActivityOp.SET_STREAM_READONLY,
        ActivityOp.DELETE_STREAM,
    ]
    create, pause, readonly, _ = ours
    assert create.partitions == (0, 1)
    assert pause.partitions == (1,) and pause.resume_all is True
    assert readonly.partitions == (0,) and readonly.readonly is True
