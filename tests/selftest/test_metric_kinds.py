"""The two kinds of metric that need no limit have two names, and each name holds:

* ``report_only``: reported, not judged. Its judge records it with ``judge.info`` (no judge in gpuaccept/
  hands it to ``judge.check``), and no thresholds file may set it a limit, which would judge nothing.
* ``limit_optional``: judged only where a SKU, a site file or a site contract sets a limit, shown elsewhere.

The old key ``informational: true`` said both at once; a catalogue still writing it is told the two keys.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from gpuaccept.judging.judge import Judge
from gpuaccept.thresholds.loader import ThresholdsError, default_path, load_thresholds
from gpuaccept.thresholds.schema import Limit

from .conftest import REPO

pytestmark = pytest.mark.selftest

PACKAGED = load_thresholds()


def _copy(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load(default_path().read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "thresholds.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _name_patterns(node: ast.expr) -> list[str]:
    """The metric names a ``judge.check`` argument can be, as regular expressions: a constant whole, an
    f-string with each placeholder a word (``f"storage_aggregate_{rw}_gbps"``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [re.escape(node.value)]
    if isinstance(node, ast.JoinedStr):
        parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"\w+" for v in node.values]
        return ["".join(parts)]
    return []


def _checked() -> set[str]:
    """Every catalogue metric a module of gpuaccept/ hands to ``.check(...)`` by a name the source spells."""
    found: set[str] = set()
    for path in sorted((REPO / "gpuaccept").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "check":
                for pattern in _name_patterns(node.args[0]) if node.args else []:
                    found |= {m for m in PACKAGED.metrics if re.fullmatch(pattern, m)}
    return found


def test_both_names_are_in_use() -> None:
    kinds = [(s.report_only, s.limit_optional) for s in PACKAGED.metrics.values()]
    assert (True, False) in kinds and (False, True) in kinds


def test_no_judge_checks_a_report_only_metric() -> None:
    checked = _checked()
    assert {"storage_aggregate_write_gbps", "ib_port_rate_gbps", "matmul_bf16_tflops"} <= checked  # the scan reads
    wrong = sorted(m for m in checked if PACKAGED.metrics[m].report_only)
    assert not wrong, f"judged with judge.check, so limit_optional, not report_only: {wrong}"


def test_a_limit_for_a_report_only_metric_is_refused(tmp_path: Path) -> None:
    path = _copy(tmp_path, lambda d: d["defaults"].update({"gpu_temperature_c": {"max": 90, "source": "a test"}}))
    with pytest.raises(ThresholdsError, match=r"defaults\.gpu_temperature_c: gpu_temperature_c is report_only"):
        load_thresholds(defaults=path)
    site = tmp_path / "site.yaml"
    site.write_text("defaults:\n  gpu_temperature_c: {max: 90, source: a site's own rule}\n", encoding="utf-8")
    with pytest.raises(ThresholdsError, match="limit_optional in the catalogue"):
        load_thresholds(site)


def test_the_old_key_is_refused_naming_the_two(tmp_path: Path) -> None:
    def old(data: dict) -> None:  # type: ignore[type-arg]
        spec = data["metrics"]["gpu_temperature_c"]
        spec.pop("report_only")
        spec["informational"] = True

    with pytest.raises(ThresholdsError) as refused:
        load_thresholds(defaults=_copy(tmp_path, old))
    said = str(refused.value)
    assert "metrics.gpu_temperature_c" in said and "report_only: true" in said and "limit_optional: true" in said


def test_both_keys_at_once_are_refused(tmp_path: Path) -> None:
    path = _copy(tmp_path, lambda d: d["metrics"]["gpu_temperature_c"].update({"limit_optional": True}))
    with pytest.raises(ThresholdsError, match="report_only and limit_optional both"):
        load_thresholds(defaults=path)


def test_a_reading_not_taken_is_an_error_only_where_it_is_judged() -> None:
    """A None handed to ``judge.check``: could not measure where the figure is judged (a SKU's limit, or one the
    check passes), ``info`` where nothing would judge it (a driver without a figure only shown is no node fault)."""
    metric, judged_on = next(
        (m, sku)
        for m, spec in sorted(PACKAGED.metrics.items())
        if spec.limit_optional
        for sku in sorted(PACKAGED.skus)
        if m in PACKAGED.limits_for(sku)
    )
    unlimited = next(sku for sku in sorted(PACKAGED.skus) if metric not in PACKAGED.limits_for(sku))
    skus = {"judged": judged_on, "shown": unlimited}
    judge = Judge(PACKAGED, skus.__getitem__, lambda result: None, "selftest")
    judge.check(metric, None, node="judged", unread="NVML gave no value (NVMLError_NotSupported)")
    judge.check(metric, None, node="shown", unread="NVML gave no value (NVMLError_NotSupported)")
    judge.check(metric, None, node="shown", limit=Limit(min=1, source="a site's contract"))
    assert [r.verdict for r in judge.results] == ["unmeasured", "info", "unmeasured"], (metric, skus)
    assert all(r.reason == "NVML gave no value (NVMLError_NotSupported)" for r in judge.results[:2])
