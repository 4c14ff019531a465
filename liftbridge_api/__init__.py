"""Code generated from api.proto (the Liftbridge v1.9.0 wire API). Not a public surface.

Do not edit these modules: ``make proto`` (scripts/gen_proto.py) regenerates them from
``api.proto`` with pinned generators, and a test checks they match. The package ships
because ``liftbridge`` imports it; only ``liftbridge`` should: protobuf objects never
reach user code, and this package may change in any release.
"""
