"""The unit suite on every supported Python (3.11, 3.12, 3.13), from `make test`.

The interpreters come from PATH (pyenv's shims here); the session venvs are
kept in .nox/ and reused, so a second run only runs the tests.
"""

from __future__ import annotations

import nox

nox.options.reuse_existing_virtualenvs = True
# uv makes and fills a fresh session venv in seconds where pip takes minutes
# (CI starts from a clean checkout); plain virtualenv if uv is missing.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True

PYTHONS = ["3.11", "3.12", "3.13"]


@nox.session(python=PYTHONS)
def unit(session: nox.Session) -> None:
    """The unit tests (no network, no servers) on one Python version."""
    session.install("-e", ".[dev,nats,pynats2]")
    # The unit tests mostly wait (fake peers, deadlines): three workers unless
    # the caller says (`make test` runs two sessions at once, `-- -n 2` each).
    workers = [] if "-n" in session.posargs else ["-n", "3"]
    session.run("pytest", "-q", "-p", "no:cacheprovider", *workers, "tests/unit", *session.posargs)
