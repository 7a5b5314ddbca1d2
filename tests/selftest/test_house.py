"""The house rules a newcomer can rely on, held by CI: no import cycle between gpuaccept's modules nor
between its packages, every import running down the declared layers (``LAYERS``, drawn in
docs/ARCHITECTURE.md), a judging core that imports no domain (NCCL, fabric, hardware, training), and a
warning (never a failure) for a module past 400 lines: a long module is a hint to split it by what it
holds, not a number to squeeze code under.

Imports are read from the source, outside ``if TYPE_CHECKING:``. The module cycle counts module-level
imports (one inside a function runs late and cannot close a cycle at import time); the package cycle,
the layers and the judging core count every import, in functions too: a late import is still a
dependency that runs one way or the other.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

PACKAGE = Path(__file__).resolve().parents[2] / "gpuaccept"
ACCEPTANCE = PACKAGE.parent / "tests" / "acceptance"
#: tests whose area has its judging module (gpuaccept/hardware/, gpuaccept/verdicts/): they say what to
#: measure and hand it over
AREA_TESTS = ("gpu_health", "compute", "memory", "interconnect", "hygiene", "environment", "slurm", "nccl", "fabric")
LONG_MODULE = 400
#: what the judging core may import from gpuaccept: itself, the contracts, the results and thresholds it judges with
CORE_MAY_IMPORT = (
    "gpuaccept.judging",
    "gpuaccept.contracts",
    "gpuaccept.results",
    "gpuaccept.thresholds",
    "gpuaccept.errors",
)


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module_level: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpuaccept"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("gpuaccept"))
            if not module_level:
                visit(list(ast.iter_child_nodes(node)))  # type: ignore[arg-type]
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []))

    visit(tree.body)
    return found


MODULES = {_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}

#: The layers, bottom first: (layer, its packages and top-level modules, the layers it may import).
#: A package imports its own modules, its own layer's and those of the layers named; nothing else.
#: The node side (area code, probes) and the judging side (judging core, judges) meet only in
#: ``contracts``: no probe imports a judge, no judge a probe. docs/ARCHITECTURE.md draws the same table.
LAYERS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("leaves", ("units", "errors", "testhooks", "timelimits"), ()),
    ("contracts", ("contracts",), ("leaves",)),
    ("area code", ("nccl", "fabric", "training", "inference"), ("leaves", "contracts")),
    ("probes", ("probes",), ("leaves", "contracts", "area code")),
    ("results", ("results", "thresholds"), ("leaves", "contracts")),
    ("judging core", ("judging",), ("leaves", "contracts", "results")),
    ("judges", ("hardware", "verdicts"), ("leaves", "contracts", "area code", "results", "judging core")),
    ("options", ("settings", "markers", "hookspecs", "inputs"), ("leaves",)),
    (
        "launch",
        ("dispatch", "cluster", "fingerprints"),
        ("leaves", "contracts", "area code", "probes", "results", "options"),
    ),
    (
        "session",
        ("state", "record_keeper", "fixtures", "startup", "fleet", "calibrate", "report", "nodecheck", "plugin"),
        ("leaves", "contracts", "area code", "probes", "results", "judging core", "judges", "options", "launch"),
    ),
)
LAYER_OF = {package: layer for layer, packages, _ in LAYERS for package in packages}
MAY_IMPORT = {layer: {layer, *below} for layer, _, below in LAYERS}


def _package(module: str) -> str:
    """``gpuaccept.nccl.plan`` -> ``nccl``; a top-level module (``gpuaccept.units``) is its own package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _package_imports() -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the imports that draw that arrow, every import counted."""
    arrows: dict[tuple[str, str], list[str]] = {}
    for module, path in MODULES.items():
        for target in _imports(path, False):
            source, dest = _package(module), _package(target if target in MODULES else target.rsplit(".", 1)[0])
            if source and dest and source != dest:
                arrows.setdefault((source, dest), []).append(f"{module} -> {target}")
    return arrows


def _package_cycle(arrows: Iterable[tuple[str, str]]) -> list[str] | None:
    """A cycle between packages (the first found, closed), or None."""
    graph: dict[str, set[str]] = {}
    for source, dest in arrows:
        graph.setdefault(source, set()).add(dest)
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(package: str) -> list[str] | None:
        state[package] = 1
        stack.append(package)
        for target in sorted(graph.get(package, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := walk(target)):
                return cycle
        stack.pop()
        state[package] = 2
        return None

    for package in sorted(graph):
        if package not in state and (cycle := walk(package)):
            return cycle
    return None


def _against_layers(arrows: dict[tuple[str, str], list[str]]) -> list[str]:
    """Every import whose arrow the layer table does not allow (or whose package it does not place)."""
    wrong = []
    for (source, dest), why in sorted(arrows.items()):
        if source not in LAYER_OF or dest not in LAYER_OF:
            wrong.append(f"{source} -> {dest}: place {source if source not in LAYER_OF else dest} in LAYERS")
        elif LAYER_OF[dest] not in MAY_IMPORT[LAYER_OF[source]]:
            wrong += [f"{w} ({LAYER_OF[source]} may not import {LAYER_OF[dest]})" for w in why]
    return wrong


def test_no_import_cycle() -> None:
    graph = {m: {i for i in _imports(p, True) if i in MODULES and i != m} for m, p in MODULES.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target) :], target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target not in state:
                walk(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module)


def test_no_package_cycle() -> None:
    """Two packages importing each other (in any function too) is one layer split wrongly."""
    cycle = _package_cycle(_package_imports())
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_imports_run_down_the_layers() -> None:
    every = {p.stem if p.parent == PACKAGE else p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    every |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert not every - set(LAYER_OF), f"place these in LAYERS: {sorted(every - set(LAYER_OF))}"
    assert not (wrong := _against_layers(_package_imports())), "\n".join(wrong)


def test_the_layer_checks_catch_what_they_are_for() -> None:
    """The two checks above fail on what they exist to catch: a cycle between packages that no two
    modules close (a.x -> b.y, b.z -> a.w), and a probe importing a judge."""
    assert _package_cycle([("probes", "nccl"), ("nccl", "verdicts"), ("verdicts", "probes")]) is not None
    assert _package_cycle([("probes", "nccl"), ("verdicts", "nccl")]) is None
    upward = {("probes", "verdicts"): ["gpuaccept.probes.nccl -> gpuaccept.verdicts.nccl"]}
    assert _against_layers(upward) == [
        "gpuaccept.probes.nccl -> gpuaccept.verdicts.nccl (probes may not import judges)"
    ]
    assert _against_layers({("verdicts", "probes"): ["x"]}) == ["x (judges may not import probes)"]
    assert _against_layers({("verdicts", "contracts"): ["x"]}) == []


def test_long_modules_are_named() -> None:
    """A module past 400 lines is named in a warning (pytest's summary), so a reviewer sees it grow."""
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > LONG_MODULE}
    for module, lines in sorted(long.items(), key=lambda item: -item[1]):
        warnings.warn(f"{module}: {lines} lines (over {LONG_MODULE}): split it by what it holds?", stacklevel=1)


def test_the_judging_core_knows_no_domain() -> None:
    core = {m: p for m, p in MODULES.items() if m.startswith("gpuaccept.judging")}
    wrong = {m: sorted(i for i in _imports(p, False) if not i.startswith(CORE_MAY_IMPORT)) for m, p in core.items()}
    assert not {m: w for m, w in wrong.items() if w}, wrong


def test_area_tests_judge_nothing_themselves() -> None:
    """One home per area: an area's test hands its measurement to its module in gpuaccept/hardware/ or
    gpuaccept/verdicts/; a ``judge.check`` / ``expect`` / ``unreadable`` in the test itself is a second home."""
    found = []
    for area in AREA_TESTS:
        tree = ast.parse((ACCEPTANCE / f"test_{area}.py").read_text())
        for node in ast.walk(tree):
            call = node.func if isinstance(node, ast.Call) else None
            if isinstance(call, ast.Attribute) and call.attr in ("check", "expect", "unreadable", "stragglers"):
                if isinstance(call.value, ast.Name) and call.value.id == "judge":
                    found.append(f"test_{area}.py:{node.lineno} judge.{call.attr}")
    assert not found, found
