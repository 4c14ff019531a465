"""Publishing: from a publish call to the path that carries it (the shared
PublishAsync stream, per-thread lanes, the ack-inbox RPC, the NATS publishers),
with in-flight windows and the bytes of a publish."""
