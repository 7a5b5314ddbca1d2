"""Assertions the fault proofs share: a row's named tests, from an inner run's record."""

from __future__ import annotations

from typing import Any

from .conftest import InnerRun
from .fault_rows import Row

__all__ = ["assert_named", "assert_nothing_else_fails", "failed", "tests_of"]


def tests_of(run: InnerRun) -> dict[str, dict[str, Any]]:
    """Test name (``test_x[node1]``) -> its entry in the run record."""
    return {t["nodeid"].split("::")[-1]: t for t in run.record["tests"]}


def failed(test: dict[str, Any]) -> set[tuple[str, str]]:
    """(check, where) of every check of the test that did not pass (informational figures aside)."""
    return {(c["check"], c["where"]) for c in test.get("checks") or [] if c["verdict"] not in ("pass", "info")}


def assert_named(row: Row, run: InnerRun) -> None:
    """Each test the row names ends with its verdict and category and names its checks and message."""
    tests = tests_of(run)
    for named in row.named:
        assert named.test in tests, (named.test, sorted(tests), run.output[-3000:])
        test = tests[named.test]
        assert (test["verdict"], test.get("category")) == (named.verdict, named.category), (named.test, test["message"])
        missing = set(named.checks) - failed(test)
        assert not missing, (named.test, "not named:", missing, "failed:", failed(test))
        assert named.message in test["message"], (named.test, test["message"])


def assert_nothing_else_fails(rows: tuple[Row, ...], run: InnerRun, at_least: int) -> None:
    """Every check a test fails is one a row declares, and every test no row names passes."""
    declared: dict[str, set[tuple[str, str]]] = {}
    for row in rows:
        for named in row.named:
            declared.setdefault(named.test, set()).update(named.checks)
    tests = tests_of(run)
    assert len(tests) >= at_least, (sorted(tests), run.output[-3000:])
    for name, test in tests.items():
        if name not in declared:
            assert test["verdict"] == "passed", (name, test["verdict"], test["message"])
        else:
            assert failed(test) == declared[name], (name, failed(test), declared[name])
