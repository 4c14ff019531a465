"""What every feature stands on: the router (cluster view, routing, one deadline
per call), metadata, ack deadlines, retry policies, the callbacks thread, broker
liveness, argument checks, and the value objects and codecs all layers share."""
