"""SKU coverage: on every listed SKU and node shape, each test that runs finds a limit for what it judges.

Each acceptance test declares which metrics it judges and when it runs (``@pytest.mark.judges``, read by
``declared_tests`` below and handed to ``gpuaccept/thresholds/coverage.coverage``). Three things hold the
declarations to the truth, so they cannot drift from the tests quietly:

* the metric names written in ``tests/acceptance/*.py`` and in the gpuaccept modules they import;
* the tests that exist (a new test must be declared);
* run records in ``fixtures/runs/`` (a loopback run on this machine; records of GPU runs go beside it):
  each test that ran there judged only declared metrics, and ran or skipped as the declaration predicts.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpuaccept.thresholds.coverage import (
    ABSENCE_METRIC,
    LAYOUTS,
    NETWORK_METRICS,
    NodeLayout,
    TestSpec,
    coverage,
    declares_absent,
)
from gpuaccept.thresholds.loader import Thresholds, load_thresholds

REPO = Path(__file__).resolve().parents[2]
ACCEPTANCE = REPO / "tests" / "acceptance"
RUNS = sorted((REPO / "fixtures" / "runs").glob("*.json"))
PACKAGED = load_thresholds()


def declared_tests(folder: Path = ACCEPTANCE) -> dict[str, TestSpec]:
    """``file::function`` -> what each acceptance test judges and when it runs, read from the test's own
    ``@pytest.mark.judges(*metrics, gpus=, nodes=, absent=, optional=, scaled=)`` (a test without it
    judges no metric with a limit: expectations only). The declaration sits on the test, as ReFrame keeps
    a check and its references together; the selftests hold it to the metric names in the code.

    The suite reads its own marks here, by importing its modules (the marks name metric tuples that the
    judging modules compute), and hands them to ``coverage``: gpuaccept's threshold layer may import no
    test (tests/selftest/test_house.py)."""
    out: dict[str, TestSpec] = {}
    for path in sorted(folder.glob("test_*.py")):
        module = importlib.import_module(f"{folder.parent.name}.{folder.name}.{path.stem}")
        for name, fn in sorted(vars(module).items()):
            if not (name.startswith("test_") and callable(fn)) or getattr(fn, "__module__", "") != module.__name__:
                continue
            marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "judges"]
            out[f"{path.name}::{name}"] = TestSpec(tuple(marks[0].args), **marks[0].kwargs) if marks else TestSpec(())
    return out


TESTS = declared_tests()


# ---- the coverage itself --------------------------------------------------------------------------------


def site_for(sku: str, shape: NodeLayout, tmp: Path) -> Thresholds:
    """The thresholds a site of this shape runs with: the packaged file, plus the site file declaring what
    its nodes lack that the SKU has (as the files in fixtures/site/ do): NVLink on a GPU passed alone to a
    VM, InfiniBand on a cluster without it (and the TCP network NCCL then uses)."""
    limits = PACKAGED.limits_for(sku)
    declared: dict[str, dict[str, object]] = {}
    if shape.gpus and not shape.nvlink and not declares_absent(limits.get(ABSENCE_METRIC["nvlink"])):
        declared["nvlink_links_active"] = {"equal": 0, "source": "site: no NVSwitch fabric behind this GPU"}
    if not shape.ib and not declares_absent(limits.get(ABSENCE_METRIC["ib"])):
        declared["ib_hca_count"] = {"equal": 0, "source": "site: no InfiniBand HCA"}
        declared["nccl_net_transport"] = {"equal": "Socket", "source": "site: NCCL over TCP between nodes"}
    if not declared:
        return PACKAGED
    site = tmp / f"{sku}-{shape.gpus}-{shape.nvlink}-{shape.ib}-{shape.nodes}.yaml"
    site.write_text(yaml.safe_dump({"skus": {sku: {"limits": declared}}}))
    return load_thresholds(site)


CASES = [(sku, shape) for sku, shapes in LAYOUTS.items() for shape in shapes]


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, NodeLayout, bool], list[str]]:
    """Each case's coverage problems, computed once for the module: the per-SKU test and the training
    test read the same coverage (a site file loaded per case is most of its time)."""
    tmp, cache = tmp_path_factory.mktemp("sites"), {}

    def of(sku: str, shape: NodeLayout, training: bool) -> list[str]:
        key = (sku, shape.label)
        if key not in cache:
            cache[key] = coverage(site_for(sku, shape, tmp), sku, shape, TESTS).problems()
        return [p for p in cache[key] if ("test_training.py" in p) == training]

    return of


@pytest.mark.parametrize(("sku", "shape"), CASES, ids=[f"{s}-{sh.label}" for s, sh in CASES])
def test_every_judged_metric_has_a_limit(sku, shape, problems):
    found = problems(sku, shape, False)
    assert not found, "\n".join(found)


def test_every_training_metric_has_a_limit(problems):
    found = [p for sku, shape in CASES for p in problems(sku, shape, True)]
    assert not found, "\n".join(found)


def test_a_sku_without_a_fabric_leaves_only_the_network_floors_to_the_site():
    two_nodes = NodeLayout(gpus=8, nvlink=False, ib=False, nodes=2)
    l40s = coverage(PACKAGED, "L40S", two_nodes, TESTS)
    assert set(l40s.site_declares) == {
        "test_fabric.py::test_nccl_rails",
        "test_nccl.py::test_nccl_scale",
        "test_nccl.py::test_nccl_node_at_fault",
        # the same bisection inside an NVLink block's trays (Slurm's topology/block need not mean NVL72)
        "test_nvlink_domain.py::test_domain_tray_at_fault",
    }
    assert {m for ms in l40s.site_declares.values() for m in ms} <= NETWORK_METRICS
    for sku in ("H100-SXM-80GB", "H200", "A100-SXM4-80GB", "B200", "B300"):
        assert not coverage(PACKAGED, sku, NodeLayout(8, True, True, 2), TESTS).site_declares, sku


def test_a_grace_blackwell_tray_leaves_its_scale_out_network_to_the_site():
    """GB200/GB300 trays' NICs are the buyer's choice (InfiniBand, Ethernet, EFA): their network floors are the
    site's, and nothing else is (every other judged metric has the SKU's own limit)."""
    for sku in ("GB200", "GB300"):
        tray = coverage(PACKAGED, sku, NodeLayout(gpus=4, nvlink=True, ib=False, nodes=2), TESTS)
        assert tray.site_declares and {m for ms in tray.site_declares.values() for m in ms} <= NETWORK_METRICS, sku
        assert not tray.missing, (sku, tray.missing)


def test_a_declared_absence_skips_and_a_missing_limit_is_found():
    """The coverage can fail: L40S's absent NVLink skips the NVLink tests (as the tests do), and a SKU
    whose NCCL floors are taken away is reported on the test that would ERROR."""
    eight_pcie = NodeLayout(gpus=8, nvlink=False, ib=False, nodes=1)
    l40s = coverage(PACKAGED, "L40S", eight_pcie, TESTS)
    assert "declares no NVLink" in l40s.skipped["test_interconnect.py::test_nvlink"]
    assert "declares no NVLink" in l40s.skipped["test_interconnect.py::test_gpu_topology"]
    assert "test_memory.py::test_p2p" in l40s.judged
    stripped = Thresholds(
        PACKAGED.metrics,
        PACKAGED.settings,
        PACKAGED.defaults,
        {
            **PACKAGED.skus,
            "L40S": PACKAGED.skus["L40S"].model_copy(
                update={"limits": {k: v for k, v in PACKAGED.skus["L40S"].limits.items() if not k.startswith("nccl_")}}
            ),
        },
        PACKAGED.files,
    )
    assert "test_nccl.py::test_nccl_node" not in l40s.missing
    missing = coverage(stripped, "L40S", eight_pcie, TESTS).missing["test_nccl.py::test_nccl_node"]
    assert "nccl_all_reduce_busbw_gbs" in missing and "nccl_wrong_elements" not in missing


# ---- the declaration against the tests' code ------------------------------------------------------------

JUDGED = {m for m, spec in PACKAGED.metrics.items() if spec.kind == "metric"}


def _names(tree: ast.AST) -> set[str]:
    """Catalogue metric names a piece of code writes: string constants, and f-strings with a literal part
    (f"nccl_rail_{c}_busbw_gbs") matched against the catalogue."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in JUDGED:
            found.add(node.value)
        elif isinstance(node, ast.JoinedStr):
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"\w*" for v in node.values]
            if any(isinstance(v, ast.Constant) and len(str(v.value)) > 3 for v in node.values):
                found |= {m for m in JUDGED if re.fullmatch("".join(parts), m)}
    return found


def _judged_names(tree: ast.AST) -> set[str]:
    return {m for m in _names(tree) if not PACKAGED.metrics[m].informational}


def _imported_modules(tree: ast.Module) -> list[Path]:
    """The gpuaccept modules a test file imports, and the suite's own helper modules it imports (``from
    .nccl_passes import ...``) with the gpuaccept modules those import: a pass shared by two test files is
    theirs."""
    paths = []
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.level == 1 and (ACCEPTANCE / f"{node.module}.py").exists():
            helper = ACCEPTANCE / f"{node.module}.py"
            paths += [helper, *_imported_modules(ast.parse(helper.read_text()))]
        elif node.level == 0 and node.module.startswith("gpuaccept."):
            path = REPO / (node.module.replace(".", "/") + ".py")
            if path.exists():
                paths.append(path)
    return paths


def _files() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text()) for p in sorted(ACCEPTANCE.glob("test_*.py"))}


def _declared(file: str) -> set[str]:
    return {m for test, spec in TESTS.items() if test.startswith(file + "::") for m in spec.metrics}


def test_every_acceptance_test_is_declared():
    found = {
        f"{name}::{fn.name}"
        for name, tree in _files().items()
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")
    }
    assert found == set(TESTS), f"not declared: {sorted(found - set(TESTS))}; gone: {sorted(set(TESTS) - found)}"


@pytest.mark.parametrize("file", sorted(p.name for p in ACCEPTANCE.glob("test_*.py")))
def test_declaration_matches_the_metric_names_in_the_code(file):
    tree = _files()[file]
    declared = _declared(file)
    written_here = _judged_names(tree)
    reachable = _names(tree) | {m for path in _imported_modules(tree) for m in _names(ast.parse(path.read_text()))}
    # the absence metrics are read by the tests to decide a skip; they are judged where they are declared
    assert written_here - declared - set(ABSENCE_METRIC.values()) == set(), f"{file} judges undeclared metrics"
    assert declared - reachable == set(), f"declared for {file} but named nowhere in it or what it imports"


def test_modules_the_tests_import_judge_only_declared_metrics():
    declared = {m for spec in TESTS.values() for m in spec.metrics}
    helpers = {path for tree in _files().values() for path in _imported_modules(tree)}
    extra = {f"{p.relative_to(REPO)}: {m}" for p in helpers for m in _judged_names(ast.parse(p.read_text())) - declared}
    assert not extra, sorted(extra)


def _functions(paths: list[Path]) -> dict[str, str]:
    """Name -> source of every module-level function in ``paths``."""
    out = {}
    for path in paths:
        text = path.read_text()
        for f in ast.parse(text).body:
            if isinstance(f, ast.FunctionDef):
                out[f.name] = ast.get_source_segment(text, f) or ""
    return out


@pytest.mark.parametrize("test", sorted(t for t, s in TESTS.items() if s.absent in ("nvlink", "ib")))
def test_a_test_about_an_absent_thing_reads_its_declaration(test):
    """A test the declaration says skips on a declared absence skips on a rule that reads that declaration:
    in its own code, its file's helpers, or the verdicts module it asks (``nvlink_absent``, ``ib_absent``...),
    followed through the functions they call."""
    file, name = test.split("::")
    modules = _imported_modules(_files()[file])
    modules += [m for path in modules for m in _imported_modules(ast.parse(path.read_text()))]
    functions = _functions([ACCEPTANCE / file, *modules])
    metric = ABSENCE_METRIC[TESTS[test].absent]  # type: ignore[index]
    seen, todo, bodies = set(), [name], ""
    while todo:
        called = todo.pop()
        if called in seen or called not in functions:
            continue
        seen.add(called)
        bodies += functions[called]
        todo += re.findall(r"\b(\w+)\(", functions[called])
    assert "skip" in bodies and metric in bodies, f"{test} does not decide its skip on {metric}"


# ---- the declaration against run records ----------------------------------------------------------------


def _record_thresholds(record: dict) -> Thresholds:
    sites = [REPO / "fixtures" / "site" / Path(f).name for f in record["thresholds"]["files"][1:]]
    return load_thresholds(sites[0] if sites else None)


def _record_shape(record: dict, thresholds: Thresholds, sku: str) -> NodeLayout:
    counts = {f["gpus"]["count"] for f in record["fingerprints"].values() if "gpus" in f}
    assert len(counts) == 1, f"nodes with different GPU counts: {counts}"
    gpus = counts.pop()
    limits = thresholds.limits_for(sku)
    nvlink = gpus >= 2 and not declares_absent(limits.get("nvlink_links_active"))
    ib = not declares_absent(limits.get("ib_hca_count"))
    return NodeLayout(gpus, nvlink, ib, len(record["cluster"]["nodes"]))


def test_there_is_a_run_record_to_hold_the_declaration_to():
    assert RUNS, "fixtures/runs/ holds no run record"


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_run_record_agrees_with_the_declaration(path):
    record = json.loads(path.read_text())
    thresholds = _record_thresholds(record)
    skus = {m["sku"] for m in record["metrics"] if m.get("sku")}
    assert len(skus) == 1, f"{path.name}: one SKU per record, found {skus}"
    sku = skus.pop()
    cov = coverage(thresholds, sku, _record_shape(record, thresholds, sku), TESTS)
    problems = []
    for test in record["tests"]:
        key = test["nodeid"].split("/")[-1].split("[")[0]
        judged = {
            m["metric"]
            for m in record["metrics"]
            if m["test"] == test["nodeid"] and m["kind"] == "metric" and m["verdict"] != "info"
        }
        if test["verdict"] == "skipped":
            if key in cov.judged and TESTS[key].optional is None:
                problems.append(f"{key}: skipped ({test['message']}) where the declaration has it run")
        elif key in cov.skipped:
            problems.append(f"{key}: ran where the declaration has it skip ({cov.skipped[key]})")
        elif extra := judged - set(cov.judged.get(key, ())):
            problems.append(f"{key}: judged {sorted(extra)}, not declared")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_a_record_that_judges_an_undeclared_metric_is_caught(monkeypatch):
    """The record check can fail: with nofile taken out of test_node_limits' declaration, the loopback
    record (which judged nofile there) disagrees."""
    monkeypatch.setitem(TESTS, "test_hygiene.py::test_node_limits", TestSpec(("dev_shm_gib", "memlock_kib")))
    with pytest.raises(AssertionError, match=r"test_node_limits: judged \['nofile'\]"):
        test_run_record_agrees_with_the_declaration(REPO / "fixtures" / "runs" / "loopback-cpu-2nodes.json")


#: the machines measured so far (docs/measurements.md), each with the site file that declares what it lacks, and
#: the layouts they run
MEASURED_SITES = {
    "h100-1gpu.yaml": ("H100-SXM-80GB", [NodeLayout(1, False, False, 1)]),
    "h200-multi-gpu-no-ib.yaml": ("H200", [NodeLayout(2, True, False, 1), NodeLayout(1, True, False, 2)]),
    "h200-1gpu.yaml": ("H200", [NodeLayout(1, False, False, 1)]),
    "h200-socket-net.yaml": ("H200", [NodeLayout(1, True, False, 2)]),
}


@pytest.mark.parametrize("site", sorted(MEASURED_SITES))
def test_measured_machines_are_covered_by_their_site_file(site):
    sku, shapes = MEASURED_SITES[site]
    thresholds = load_thresholds(REPO / "fixtures" / "site" / site)
    for shape in shapes:
        result = coverage(thresholds, sku, shape, TESTS)
        problems = [p for p in result.problems() if "test_training.py" not in p]
        assert not problems, "\n".join(problems)
        assert not result.site_declares
