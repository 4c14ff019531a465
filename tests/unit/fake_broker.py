"""An in-process fake broker for unit tests of paths the real server cannot
be made to show on cue: subclasses script PublishAsync; this answers
metadata with itself as the only broker."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import TypeVar

import grpc

from liftbridge_api import api_pb2, api_pb2_grpc


class FakeBroker(api_pb2_grpc.APIServicer):
    """Answers FetchMetadata with one broker: itself, on ``port``."""

    port = 0

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        return api_pb2.FetchMetadataResponse(
            brokers=[api_pb2.Broker(id="fake", host="127.0.0.1", port=self.port)]
        )


def one_partition_stream(name: str = "s") -> api_pb2.StreamMetadata:
    """Metadata of a stream with one partition, led by the fake broker alone."""
    partition = api_pb2.PartitionMetadata(id=0, leader="fake", replicas=["fake"], isr=["fake"])
    return api_pb2.StreamMetadata(name=name, subject=name, partitions={0: partition})


B = TypeVar("B", bound=FakeBroker)


@contextmanager
def serving(broker: B, *, workers: int = 16) -> Iterator[B]:
    """Serves ``broker`` on a free loopback port until the block ends."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    api_pb2_grpc.add_APIServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield broker
    finally:
        server.stop(grace=None)
