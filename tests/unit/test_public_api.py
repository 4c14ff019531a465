"""The public surface: __all__ is sorted, complete, and every name resolves."""

from __future__ import annotations

import inspect

import liftbridge


def _isort_key(name: str) -> tuple[int, str]:
    """Ruff's RUF022 order: CONSTANTS, then Classes, then everything else."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[0].isupper() else (2, name)


def test_all_is_sorted_and_unique() -> None:
    assert liftbridge.__all__ == sorted(set(liftbridge.__all__), key=_isort_key)


def test_all_names_resolve() -> None:
    for name in liftbridge.__all__:
        assert hasattr(liftbridge, name), name


def test_every_public_class_is_exported() -> None:
    exported = set(liftbridge.__all__)
    for name, value in vars(liftbridge).items():
        if name.startswith("_") or inspect.ismodule(value):
            continue
        assert name in exported, f"{name} is importable from liftbridge but missing from __all__"


def test_every_error_is_in_the_tree() -> None:
    for name in liftbridge.__all__:
        value = getattr(liftbridge, name)
        if inspect.isclass(value) and issubclass(value, BaseException):
            assert issubclass(value, liftbridge.LiftbridgeError), name
