"""``python -m bench``: see :mod:`bench.cli` and ``python -m bench --help``."""

from bench.cli import main

raise SystemExit(main())
