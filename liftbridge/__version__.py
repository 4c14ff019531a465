"""The one place the package version is written down (pyproject.toml reads it)."""

__version__ = "0.1.0.dev0"
