"""Inner-run plugin (``-p tests.selftest._raise_in_judge``): every judging call raises ``KeyError``, as a
bug of ours would. Only the selftests load it (tests/selftest/test_suite_errors.py)."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from gpuaccept.judging.judge import Judge

MESSAGE = "a bug of ours in a judging call (tests/selftest/_raise_in_judge.py)"


def _broken(self: Judge, *args: Any, **kwargs: Any) -> NoReturn:
    raise KeyError(MESSAGE)


def pytest_configure(config: pytest.Config) -> None:
    Judge.check = _broken  # type: ignore[method-assign]
    Judge.expect = _broken  # type: ignore[method-assign]
