"""Code generated from api.proto (the Liftbridge v1.9.0 wire API). Not a public surface.

Only ``liftbridge`` imports these modules; protobuf objects never reach user code.
"""
