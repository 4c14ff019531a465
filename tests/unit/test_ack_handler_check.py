"""The ack_handler check of publish_async: read once per handler, still
refusing a bad one after a good one passed."""

from __future__ import annotations

from typing import Any

import pytest

from liftbridge import ArgumentTypeError
from liftbridge._core import _validate
from liftbridge._publish._options import ack_handler_checks, check_ack_handler


def _good(ack: Any, error: Any) -> None:
    pass


def _bad(ack: Any) -> None:
    pass


class _Owner:
    def on_ack(self, ack: Any, error: Any) -> None:
        pass

    def on_one(self, ack: Any) -> None:
        pass


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    seen: list[object] = []
    real = _validate.callback

    def counting(value: Any, **kwargs: Any) -> Any:
        seen.append(value)
        return real(value, **kwargs)

    monkeypatch.setattr(_validate, "callback", counting)
    monkeypatch.setattr(ack_handler_checks, "passed", None)
    return seen


def test_the_same_handler_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counted(monkeypatch)
    for _ in range(3):
        check_ack_handler(_good)
    check_ack_handler(None)
    assert seen == [_good]


def test_a_bound_method_is_read_once_per_function(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counted(monkeypatch)
    owner = _Owner()
    for _ in range(3):
        check_ack_handler(owner.on_ack)  # a new bound method object each time
    check_ack_handler(_Owner().on_ack)
    assert len(seen) == 1


def test_a_bad_handler_after_a_good_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _counted(monkeypatch)
    check_ack_handler(_good)
    with pytest.raises(ArgumentTypeError, match="ack_handler"):
        check_ack_handler(_bad)
    with pytest.raises(ArgumentTypeError, match="ack_handler"):
        check_ack_handler(_Owner().on_one)
    with pytest.raises(ArgumentTypeError, match="ack_handler"):
        check_ack_handler("not callable")
    check_ack_handler(_good)  # the good one still passes after the refusals


@pytest.mark.parametrize("handler", [[], {}, {1, 2}], ids=["list", "dict", "set"])
def test_an_unhashable_handler_gets_the_typed_error(handler: Any) -> None:
    # Hypothesis found a list reaching the trusted-handlers set: TypeError
    # "unhashable type" escaped instead of the argument's own error.
    with pytest.raises(ArgumentTypeError, match="ack_handler"):
        check_ack_handler(handler)
