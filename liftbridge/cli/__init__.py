"""The ``liftbridge-cli`` command line, built on the public API only."""

from liftbridge.cli._main import main

__all__ = ["main"]
