"""What every feature stands on: the router (cluster view, routing, one deadline
per call), the NATS connections of NATS stream publishers, metadata, ack deadlines,
retry policies, the callbacks thread, broker liveness, argument checks, and the
value objects and codecs all layers share. Features reach the transport only
through these modules."""
