"""The unit suite on every supported Python (3.11, 3.12, 3.13), from `make test`.

The interpreters come from PATH (pyenv's shims here); the session venvs are
kept in .nox/ and reused, so a second run only runs the tests.
"""

from __future__ import annotations

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

PYTHONS = ["3.11", "3.12", "3.13"]


@nox.session(python=PYTHONS)
def unit(session: nox.Session) -> None:
    """The unit tests (no network, no servers) on one Python version."""
    session.install("-e", ".[dev,nats,pynats2]")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/unit", *session.posargs)
