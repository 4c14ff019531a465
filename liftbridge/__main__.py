"""``python -m liftbridge``: the same command line as the ``liftbridge`` script."""

from liftbridge.cli import main

raise SystemExit(main())
