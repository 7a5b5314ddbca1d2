"""The session verdict: ACCEPTED or NOT ACCEPTED, and why, from a run record alone.

One place, so the record's ``verdict``, the terminal, the summary page and JUnit say the same thing:

* a run with a test hook set (``gpuaccept.selftest_hooks``, ``GPUACCEPT_SELFTEST`` included) is never
  ACCEPTED: it judged a file or a fault made on purpose, not the machine as it is;
* a failed check (the hardware missed a limit) is named first; tests the suite could not judge
  because of its own exception (category ``suite error``) are named apart from the hardware's
  failures and from what could not be measured;
* otherwise ACCEPTED only when the session ran to its end, something passed and nothing failed or
  errored; checks that could not run (a tool missing) are listed, never counted as passed.

The limits a site file loosens against the packaged ones are on the record (``loosened``) and the
summary lists them beside the verdict: an easy path to ACCEPTED that an auditor must see.
"""

from __future__ import annotations

from gpuaccept.contracts.categories import SUITE_ERROR
from gpuaccept.results.record import RunRecord
from gpuaccept.results.terminal import not_run_notes

__all__ = [
    "EXIT_COULD_NOT_JUDGE",
    "EXIT_TEST_HOOKS",
    "cluster_verdict",
    "exit_code",
    "loosened_lines",
    "session_lines",
    "verdict_line",
    "verdict_text",
]

#: pytest's exit code when tests errored (could not measure, suite error) and no hardware check failed
EXIT_COULD_NOT_JUDGE = 6
#: the exit code of a run with a test hook set whose tests passed (none failed or errored): it judged readings
#: or faults made on purpose, so a pipeline reading only the exit code must not take it for a clean run (0)
EXIT_TEST_HOOKS = 7


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _problems(record: RunRecord) -> list[str]:
    """``3 failed``, ``1 could not measure``, ``the suite could not judge 2 tests (suite error ...)``."""
    counts = record.counts
    ours = sum(1 for t in record.tests.values() if t.verdict == "error" and t.category == SUITE_ERROR)
    parts = [f"{counts['failed']} failed"] if counts.get("failed") else []
    measured = counts.get("error", 0) - ours
    if measured:
        parts.append(f"{measured} could not measure")
    if ours:
        tests = _plural(ours, "test")
        parts.append(f"the suite could not judge {tests} (suite error: a fault of the suite, not of the hardware)")
    return parts


def cluster_verdict(record: RunRecord) -> tuple[bool, str]:
    """(accepted, why): see the module docstring for the rules and their order."""
    counts = record.counts
    status = record.status
    bad = _problems(record)
    hooks = sorted(record.test_hooks)
    if hooks:
        why = f"test hooks active: {', '.join(hooks)}"
        return False, why + ("; " + ", ".join(bad) if bad else "")
    if status not in ("passed", "failed"):
        return False, f"the run did not finish ({status})" + (": " + ", ".join(bad) if bad else "")
    if bad:
        return False, ", ".join(bad)
    if counts.get("measured"):
        return False, f"a calibration run: {counts['measured']} tests measured figures no limit judged yet"
    if not counts.get("passed"):
        return False, "no test passed"
    if status != "passed":
        return False, f"the session ended {status}"
    ran = f"all {counts['passed']} tests that apply to this cluster passed"
    missing = not_run_notes(record.tests.values())
    return True, ran + (f"; not run: {'; '.join(missing)}" if missing else "")


def verdict_text(record: RunRecord, accepted: bool) -> str:
    """``ACCEPTED``, ``NOT ACCEPTED``, or ``ACCEPTED (not run: nccl-tests fidelity \u2014 nccl-tests not
    installed (node1))``: an acceptance never hides a check that could not run."""
    if not accepted:
        return "NOT ACCEPTED"
    missing = not_run_notes(record.tests.values())
    return "ACCEPTED" + (f" (not run: {'; '.join(missing)})" if missing else "")


def verdict_line(record: RunRecord) -> tuple[bool, str]:
    """(accepted, the one line the record and the terminal state): ``NOT ACCEPTED: test hooks active:
    GPUACCEPT_TEST_INJECT``, ``NOT ACCEPTED: 2 failed``, ``ACCEPTED``."""
    accepted, why = cluster_verdict(record)
    text = verdict_text(record, accepted)
    return accepted, text if accepted else f"{text}: {why}"


def exit_code(pytest_code: int, record: RunRecord, failures: int) -> int:
    """The session's exit code: pytest's own, except that

    * a run where tests ERRORed and no hardware check FAILED exits ``EXIT_COULD_NOT_JUDGE`` (6) instead of
      1, so a pipeline can tell a bad run from a bad node. A FAILED test wins (exit 1): a node that missed
      a limit is what must be acted on, whatever else could not be judged. ``failures``: pytest's count of
      failed reports, so a failure of a test outside the acceptance suite is never hidden behind a 6;
    * a run with a test hook set that would exit 0 having passed (or measured) a test exits
      ``EXIT_TEST_HOOKS`` (7): its verdict is NOT ACCEPTED, and its exit code must not say otherwise. Its
      failures and errors keep 1 and 6 (what its tests said of what they were given); a collection or a
      dry run, which judge nothing, keep 0."""
    counts = record.counts
    errors = counts.get("error", 0)
    if pytest_code == 1 and errors and not counts.get("failed") and failures <= errors:
        return EXIT_COULD_NOT_JUDGE
    if pytest_code == 0 and record.test_hooks and (counts.get("passed") or counts.get("measured")):
        return EXIT_TEST_HOOKS
    return pytest_code


def loosened_lines(record: RunRecord) -> list[str]:
    """One line per limit a site file loosens: ``dev_shm_gib on H100: min 64 (packaged) -> 8 (site.yaml)``."""
    return [
        f"{x['metric']} on {x['sku']}: {x['bound']} {x['packaged']} (packaged) -> {x['site']} ({x['file']})"
        for x in record.loosened
    ]


def session_lines(record: RunRecord) -> list[tuple[str, str]]:
    """The end of the terminal output, with the colour of each line: every test hook that was set,
    every limit a site file loosens, then the session verdict (as the record states it)."""
    lines = [
        (f"TEST HOOK {name}={hook.get('value', '')} ({', '.join(hook.get('where') or [])})", "red")
        for name, hook in sorted(record.test_hooks.items())
    ]
    lines += [(f"a site file loosens {line}", "yellow") for line in loosened_lines(record)]
    if record.verdict:
        lines.append((f"session verdict: {record.verdict}", "green" if record.accepted else "red"))
    return lines
