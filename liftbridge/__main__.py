"""``python -m liftbridge``: the same command line as the ``liftbridge-cli`` script."""

from liftbridge.cli import main

raise SystemExit(main())
