"""The transports the router opens calls on: gRPC channels (grpcio), the SDK's own
HTTP/2 streams, and the SDK's own NATS connection. Nothing here knows a feature;
every module above this folder reaches a broker through the router."""
