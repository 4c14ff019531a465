"""Benchmarks of the liftbridge SDK, measured against the bare gRPC floor and the Go client.

``make bench`` (or ``python -m bench``) starts a :class:`~liftbridge.testing.LocalServer`,
runs the workloads, prints a table and writes ``bench/results/<time>.json``.
``python -m bench --help`` lists the options (``--quick``, ``--cluster``, ``--no-rss``).

Modules: :mod:`bench.sdk` drives the public SDK, :mod:`bench.floor` the same
RPC patterns on the bare generated stub, :mod:`bench.over_nats` the NATS
publisher, :mod:`bench.rss` peak memory in a subprocess, :mod:`bench.gocli` the
official Go client (``bench/go``), :mod:`bench.suite`
puts them together, :mod:`bench.report` prints and stores the figures.
"""
