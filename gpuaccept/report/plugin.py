"""Report plugin: what a customer reads after ``pytest -m acceptance``.

Registered by ``gpuaccept.plugin``'s ``pytest_configure`` (as ``gpuaccept-report``), which replays
``pytest_configure`` here at once; that is early enough to default ``--alluredir`` before
allure-pytest's own ``pytest_configure`` reads it (ours runs inside gpuaccept's ``tryfirst`` one).

A pure listener: it learns everything through gpuaccept's typed hooks (``hookspecs.py``: the
thresholds and the baseline at configure time, each step, each check as judged, the run record once
written) and the core's verdict on each report; it reads no session state and changes no verdict.

- configure: ``reports/allure-results`` beside the ini file (else in the start folder) when the acceptance
  marker is selected and no ``--alluredir`` was given (emptied first by the controller, so a report is one run).
- collection: area/topic/check/severity/node labels (see ``labels.py``).
- during a test: the exact srun command and raw probe output of every step; at the end of the call
  a ``requirement`` label and a link per requirement its checks prove, the "checks" table (every check
  the test judged: observed, expected, verdict, source), a per-GPU bar plot per metric with its
  threshold, the comparison with the baseline (and the fingerprint diff when something regressed), the
  GPUs as a parameter.
- each report (``pytest_runtest_makereport``, outermost; ``outcomes.py``): Allure's status and message follow the
  core's verdict and category (``[threshold miss] ...``: categories.json sorts by it), the test's
  description lists its checks, and ``--junitxml`` gets short properties (node, GPUs, verdict,
  category, failed checks, a suite error) for GitLab and Jenkins, and the session verdict, the test
  hooks and the loosened limits as global properties.
- session end: the metrics CSV beside the run record, the baseline comparison CSV,
  ``environment.properties`` and ``categories.json``, ``reports/summary.html`` (the acceptance
  summary), and a terminal section on the baseline.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuaccept.judging.baseline import summarize_changes
from gpuaccept.probes.specs import FINGERPRINT
from gpuaccept.report.allure_runs import claim_run_folder, point_latest
from gpuaccept.report.outcomes import allure_outcome, junit_properties, junit_verdict
from gpuaccept.results.comparison import comparison_of, regressed, side_by_side
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import is_latest
from gpuaccept.results.table import write_metrics_csv
from gpuaccept.results.terminal import regression_lines
from gpuaccept.settings import acceptance_selected, reports_root

if TYPE_CHECKING:
    from gpuaccept.dispatch.result import ProbeResult
    from gpuaccept.dispatch.step import Step
    from gpuaccept.judging.baseline import Baseline
    from gpuaccept.report.charts import Catalogue
    from gpuaccept.results.record import RunRecord
    from gpuaccept.signing.keys import SigningKey
    from gpuaccept.thresholds.loader import Thresholds

__all__ = ["ReportSession", "default_alluredir"]

_SESSION = "gpuaccept-report-session"
_METRICS = pytest.StashKey[list[MetricResult]]()
_NODES = pytest.StashKey[set[str]]()
#: Raw output beyond this is cut (a probe gone chatty must not make the single-file report huge).
MAX_OUTPUT_BYTES = 1 << 20


def default_alluredir(config: pytest.Config) -> Path | None:
    """The alluredir in force: the user's, else reports/allure-results for an acceptance run, else None."""
    if not hasattr(config.option, "allure_report_dir"):
        return None  # allure-pytest not loaded (-p no:allure_pytest)
    given = config.option.allure_report_dir
    if given:
        return Path(given).resolve()
    if not acceptance_selected(config) or config.option.collectonly:
        return None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get("gpuaccept_alluredir"):  # the controller's run folder
        path = Path(workerinput["gpuaccept_alluredir"])
    else:  # one folder per run, so two runs never mix (reports/allure-results links to the newest)
        path = claim_run_folder(reports_root(config) / "reports")
    config.option.allure_report_dir = str(path)
    return path


def pytest_configure(config: pytest.Config) -> None:
    alluredir = default_alluredir(config)
    if not config.pluginmanager.has_plugin(_SESSION):
        config.pluginmanager.register(ReportSession(config, alluredir), _SESSION)


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(_SESSION)
    if plugin is not None:
        config.pluginmanager.unregister(plugin, _SESSION)


def _truncate(text: str) -> str:
    data = text.encode(errors="replace")
    if len(data) <= MAX_OUTPUT_BYTES:
        return text
    tail = data[-MAX_OUTPUT_BYTES:].decode(errors="replace")
    return f"[... first {len(data) - MAX_OUTPUT_BYTES} bytes cut ...]\n{tail}"


def _checks(item: pytest.Item) -> list[MetricResult]:
    """The test's checks as the judge made them (``pytest_gpuaccept_metric``), in order."""
    return item.stash.get(_METRICS, [])


class ReportSession:
    """Per-session report state and hooks (one per ``pytest.Config``)."""

    def __init__(self, config: pytest.Config, alluredir: Path | None) -> None:
        self.config = config
        self.alluredir = alluredir
        #: what the session judges by and compares with (``pytest_gpuaccept_configured``)
        self.thresholds: Thresholds | None = None
        self.baseline: Baseline | None = None
        self.fingerprints: dict[str, Any] = {}
        self.record: RunRecord | None = None
        self.changes: list[str] = []
        self.written: list[Path] = []
        self.summary: Path | None = None
        self.summary_error: str | None = None
        from gpuaccept.report.labels import topics

        self.categories = topics()

    def pytest_gpuaccept_configured(self, thresholds: Thresholds, baseline: Baseline | None) -> None:
        self.thresholds, self.baseline = thresholds, baseline

    @property
    def catalogue(self) -> Catalogue:
        return self.thresholds.metrics if self.thresholds is not None else {}

    @property
    def active(self) -> bool:
        """Allure results are being written (otherwise nothing is rendered for them)."""
        return self.alluredir is not None

    # ---- collection --------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Label before allure-pytest's own hook, so ``--allure-epics`` etc. select by our labels."""
        if not self.active:
            return
        from gpuaccept.report.labels import placement

        for item in items:
            name = getattr(item, "originalname", None) or item.name.split("[")[0]
            where = placement((m.name for m in item.iter_markers()), name, self.categories)
            for kind, value in (("epic", where.epic), ("feature", where.feature), ("story", where.story)):
                item.add_marker(pytest.mark.allure_label(value, label_type=kind))
            item.add_marker(pytest.mark.allure_label(where.severity, label_type="severity"))
            callspec = getattr(item, "callspec", None)
            if callspec is not None and "node" in callspec.params:
                item.add_marker(pytest.mark.allure_label(str(callspec.params["node"]), label_type="node"))
                item.stash[_NODES] = {str(callspec.params["node"])}

    # ---- during a test -----------------------------------------------------------------------------

    def pytest_gpuaccept_step_finished(
        self, item: pytest.Item | None, step: Step, command: list[str], result: ProbeResult | None
    ) -> None:
        if result is not None and step.spec is FINGERPRINT:
            for record in result.records:
                self.fingerprints[record.node] = record.data
        if not self.active or item is None:
            return
        import allure

        from gpuaccept.dispatch.step import shell_join
        from gpuaccept.report import attach

        labelled = item.stash.setdefault(_NODES, set())
        for node in step.nodes:
            if node not in labelled:
                labelled.add(node)
                allure.dynamic.label("node", node)
        title = f"{step.probe} on {', '.join(step.nodes)}"
        attach.text(shell_join(command) + "\n", f"command: {title}")
        if result is None:
            return
        attach.text(_truncate(result.stdout) or "(empty)\n", f"stdout: {title}")
        if result.stderr.strip():
            attach.text(_truncate(result.stderr), f"stderr: {title}")

    def pytest_gpuaccept_metric(self, item: pytest.Item | None, result: MetricResult) -> None:
        if item is not None:
            item.stash.setdefault(_METRICS, []).append(result)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        try:
            return (yield)
        finally:
            if self.active:
                self._attach_results(item)

    def _attach_results(self, item: pytest.Item) -> None:
        """Metrics table, per-GPU plots, comparison with the baseline (after the call, pass or fail)."""
        metrics = item.stash.get(_METRICS, [])
        if not metrics:
            return
        import allure

        from gpuaccept.report import attach
        from gpuaccept.report.charts import gpus as charts
        from gpuaccept.report.checks import checks_html
        from gpuaccept.report.labels import requirement_links
        from gpuaccept.thresholds.requirements import load_catalogue

        gpus = sorted({m.where for m in metrics if m.on_gpu})
        if gpus:
            allure.dynamic.parameter("GPUs", ", ".join(gpus), excluded=True)
            for gpu in gpus:
                allure.dynamic.label("gpu", gpu)
        for requirement in requirement_links(metrics, load_catalogue()):
            allure.dynamic.label("requirement", requirement.id)
            if requirement.url is not None:
                allure.dynamic.link(requirement.url, link_type="requirement", name=requirement.name)
        attach.html(checks_html(metrics), "checks")
        for metric, results in charts.bar_metrics(metrics, self.catalogue).items():
            attach.png(charts.per_gpu_bars(metric, results), f"plot: {metric} per GPU")
        if self.baseline is not None:
            frame = side_by_side(metrics)  # the comparisons the judge carried on the checks
            attach.table(frame, f"vs baseline {self.baseline.name}", highlight="status", values=("regressed",))
            if (frame["status"] == "regressed").any():
                changes = summarize_changes(self.baseline.fingerprint_changes(self.fingerprints))
                attach.text(
                    "\n".join(changes or ["no change in driver, CUDA, NCCL, torch, kernel, OS, GPUs"]) + "\n",
                    "what changed since the baseline",
                )

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Show the core's verdict: Allure status, message and description; JUnit properties.

        Outermost wrapper (``tryfirst``): runs after the core decided (``report.gpuaccept``) and
        after allure-pytest recorded its own view of the report, which this corrects to the core's.
        """
        report = yield
        data = getattr(report, "gpuaccept", None)
        if isinstance(data, dict):
            junit_properties(item, report, data, _checks(item))
            if self.active:
                allure_outcome(item, report, data, _checks(item))
        return report

    # ---- session end -------------------------------------------------------------------------------

    def pytest_gpuaccept_record_written(self, path: Path, record: RunRecord, signer: SigningKey | None) -> None:
        """Everything the session end writes is drawn from ``record`` (and the baseline the core loaded);
        the summary is signed with ``signer`` too, and shows its fingerprint."""
        self.record = record
        junit_verdict(self.config, record)
        self.written.extend(write_metrics_csv(path, record.metrics))
        if self.baseline is not None:
            self.changes = summarize_changes(self.baseline.fingerprint_changes(record.fingerprints))
            frame = side_by_side(record.metrics, self.baseline.not_measured(record.metrics))
            target = path.with_name(path.stem + ".baseline.csv")
            frame.to_csv(target, index=False)
            self.written.append(target)
        if self.active and self.alluredir is not None:
            from gpuaccept.report.allure_files import write_categories, write_environment
            from gpuaccept.report.identity import environment

            values = environment(
                record,
                path,
                baseline=None if self.baseline is None else f"{self.baseline.name} ({self.baseline.started})",
                changes=self.changes,
                regressions=[f"{c.metric} on {c.where}: {cmp.reason(c)}" for c, cmp in regressed(record.metrics)],
            )
            write_environment(self.alluredir, values)
            write_categories(self.alluredir)
            if self.alluredir.parent.name == "allure" and is_latest(path):
                point_latest(self.alluredir.parent.parent, self.alluredir)
        if record.tests:
            self._write_summary(path, record, signer)

    def _write_summary(self, path: Path, record: RunRecord, signer: SigningKey | None) -> None:
        """reports/summary.html; a page that cannot be drawn is said in the terminal, never a verdict."""
        from gpuaccept.report.summary import (
            build_summary,
            load_record,
            previous_record,
            record_thresholds,
            write_summary,
        )

        reports_dir = reports_root(self.config) / "reports"
        try:
            baseline: tuple[RunRecord, Path, bool] | None = None
            if self.baseline is not None:
                baseline = (self.baseline.record, self.baseline.path, True)
            elif (previous := previous_record(path, record)) is not None:
                baseline = (load_record(previous), previous, False)
            html = build_summary(
                record,
                record_path=path,
                reports_dir=reports_dir,
                baseline=baseline,
                thresholds=self.thresholds if self.thresholds is not None else record_thresholds(record),
                signed_by=signer.public.fingerprint if signer is not None else None,
            )
            self.summary = write_summary(reports_dir / "summary.html", html, signer=signer, rendered_from=path)
        except Exception as exc:  # a report bug must not turn into a failed acceptance run
            self.summary_error = f"{type(exc).__name__}: {exc}"

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        if self.baseline is not None and self.written:
            terminalreporter.section(f"gpuaccept vs baseline {self.baseline.name}")
            checks = self.record.metrics if self.record is not None else []
            lines = regression_lines(checks, self.changes)
            compared = sum(1 for c in checks if (found := comparison_of(c)) is not None and found.status != "new")
            if not regressed(checks) and compared:
                lines.append(f"no regression beyond tolerance in {compared} compared metric(s)")
            elif not compared:
                lines.append("no metric of this run matches one of the baseline (other nodes, GPUs or tests?)")
            for line in lines:
                terminalreporter.write_line(line, red=line.startswith("REGRESSED"))
        for path in self.written:
            kind = "vs baseline" if path.name.endswith(".baseline.csv") else "metrics table"
            terminalreporter.write_line(f"{kind}: {path}")
        if self.summary is not None:
            terminalreporter.write_line(f"acceptance summary: {self.summary}")
        elif self.summary_error is not None:
            terminalreporter.write_line(f"acceptance summary could not be written: {self.summary_error}", yellow=True)
        if self.active:
            terminalreporter.write_line(f"allure results: {self.alluredir} (HTML: gpuaccept-report)")
