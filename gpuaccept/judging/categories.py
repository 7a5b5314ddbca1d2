"""Why a test did not pass, in the six words a customer's report sorts failures by.

* ``suite error``: the test is an ERROR because an exception of ours (not a ``MeasurementError``)
  ended it: a bug of the suite, never the hardware's fault, never a FAILED, never a drain;
* ``could not measure``: the test is an ERROR (launch failure, node down, timeout, a needed limit
  missing, nothing judged);
* ``regression``: every failed check passed its floor and failed only against the baseline run;
* ``hardware fault``: a failed check the catalogue marks ``fault: hardware`` (ECC, remapped rows,
  Xid, NVLink errors, wrong results, a GPU missing);
* ``drift``: a failed check marked ``fault: drift`` (nodes disagree on driver, NCCL, ...);
* ``threshold miss``: any other failed check (a figure below its floor).

Decided from the checks on the record, so the terminal, the run record, Allure's categories and the
summary page all say the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpuaccept.contracts.categories import CATEGORIES, SUITE_ERROR
from gpuaccept.results.metrics import MetricResult

__all__ = ["CATEGORIES", "SUITE_ERROR", "category"]


def category(
    verdict: str,
    checks: Iterable[MetricResult],
    fault_of: Callable[[str], str],
    regressed_only: Callable[[MetricResult], bool],
    suite_error: bool = False,
) -> str | None:
    """The category of a test that did not pass (None for passed and skipped tests); ``suite_error``:
    an exception of ours ended it."""
    if verdict == "error":
        return SUITE_ERROR if suite_error else "could not measure"
    if verdict != "failed":
        return None
    failed = [c for c in checks if c.verdict == "fail"]
    if failed and all(regressed_only(c) for c in failed):
        return "regression"
    faults = {fault_of(c.metric) for c in failed if not regressed_only(c)}
    if "hardware" in faults:
        return "hardware fault"
    if "drift" in faults:
        return "drift"
    return "threshold miss"
