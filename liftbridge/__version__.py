"""The one place the package version is written down (setup.cfg reads it)."""

__version__ = "0.1.0.dev0"
