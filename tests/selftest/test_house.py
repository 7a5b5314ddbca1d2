"""The house rules a newcomer can rely on, held by CI: no import cycle between gpuaccept's modules, a
judging core that imports no domain (NCCL, fabric, hardware, training), and a warning (never a failure)
for a module past 400 lines: a long module is a hint to split it by what it holds, not a number to
squeeze code under.

Imports are read from the source (module level, outside ``if TYPE_CHECKING:``): an import inside a
function runs late and cannot close a cycle at import time, but it still counts for the judging core.
"""

from __future__ import annotations

import ast
import warnings
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
