"""The house rules a newcomer can rely on, held by CI: no import cycle between gpuaccept's modules nor
between its packages, every import running down the declared layers (``LAYERS``, drawn in
docs/ARCHITECTURE.md), no gpuaccept module importing the suite (``tests.*``), a judging core that imports
no domain (NCCL, fabric, hardware, training), and a warning (never a failure) for a module past 400
lines: a long module is a hint to split it by what it holds, not a number to squeeze code under.

Imports are read from the source, outside ``if TYPE_CHECKING:``, every spelling counted: ``import``,
``from`` (a relative one resolved against the importing module's package), and ``importlib.import_module``
/ ``__import__`` calls (a constant name, or an f-string's leading constant; a name the check cannot read
fails, so no spelling walks an import around the rules). Every check counts every import, in functions
too: a late import is still a dependency that runs one way or the other, and a circle of files closed
through a function's import still makes each file need the other (the tree holds none).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

import pytest

pytestmark = pytest.mark.selftest

PACKAGE = Path(__file__).resolve().parents[2] / "gpuaccept"
ACCEPTANCE = PACKAGE.parent / "tests" / "acceptance"
#: the judge's methods that record a verdict or a figure: an acceptance test calls none of them itself
RECORDING = ("check", "expect", "info", "unreadable", "stragglers", "busy")
LONG_MODULE = 400
#: what the judging core may import from gpuaccept: itself, the contracts, the results and thresholds it judges with
CORE_MAY_IMPORT = (
    "gpuaccept.judging",
    "gpuaccept.contracts",
    "gpuaccept.results",
    "gpuaccept.thresholds",
    "gpuaccept.errors",
)


#: the top-level names whose imports the checks follow: gpuaccept itself, and the suite above it (which
#: no gpuaccept module may import: the tests sit above every layer)
FIRST_PARTY = ("gpuaccept", "tests")
#: what a dynamic import (``importlib.import_module``, ``__import__``) becomes when its argument names no
#: module the check can read: an arrow to this package, which no layer may import
UNREADABLE = "?"
_DYNAMIC = ("import_module", "__import__")


def _name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _first_party(module: str) -> bool:
    return module.split(".")[0] in FIRST_PARTY


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module ``from <dots><name> import ...`` names, written absolute: relative to the importing
    module's package (``from ..verdicts import nccl`` in ``gpuaccept.probes.membw`` is ``gpuaccept.verdicts``),
    so a relative import is held to the layers as its absolute spelling is."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)] if node.level - 1 <= len(package) else []
    return ".".join([*base, *([node.module] if node.module else [])])


def _dynamic_target(call: ast.Call) -> str | None:
    """The module an ``importlib.import_module(...)`` / ``__import__(...)`` call imports, as far as its
    argument says: a constant whole; an f-string or ``"..." + x`` up to the last dot of its leading
    constant (``f"gpuaccept.verdicts.{name}"`` is ``gpuaccept.verdicts``); else ``UNREADABLE``, so a
    computed name cannot walk an import around the layers. None when the call imports nothing."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in _DYNAMIC or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    lead = arg.values[0] if isinstance(arg, ast.JoinedStr) and arg.values else None
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        lead = arg.left
    if isinstance(lead, ast.Constant) and isinstance(lead.value, str) and "." in lead.value:
        return lead.value.rsplit(".", 1)[0]
    return f"{UNREADABLE}{ast.unparse(call)}"


def _source_imports(source: str, module: str, is_package: bool, module_level: bool) -> set[str]:
    """Every first-party module ``source`` (the text of ``module``) imports: ``import``, ``from`` (relative
    ones resolved), and dynamic imports; outside ``if TYPE_CHECKING:``. ``module_level``: only what runs
    when the module is imported (not function bodies)."""
    found: set[str] = set()

    def record(node: ast.AST) -> None:
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            if _first_party(base):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _first_party(a.name))
        elif isinstance(node, ast.Call) and (target := _dynamic_target(node)) is not None:
            if target.startswith(UNREADABLE) or _first_party(target):
                found.add(target)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            record(child)
            if module_level and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            visit(child)

    visit(ast.parse(source))
    return found


def _imports(path: Path, module_level: bool, root: Path = PACKAGE.parent) -> set[str]:
    return _source_imports(path.read_text(), _name(path, root), path.name == "__init__.py", module_level)


def _modules(root: Path) -> dict[str, Path]:
    """Module name -> file, for every module of the ``gpuaccept`` tree under ``root`` (a tmp tree in the
    selftests of the checks themselves)."""
    return {_name(p, root): p for p in sorted((root / "gpuaccept").rglob("*.py"))}


MODULES = _modules(PACKAGE.parent)

#: The layers, bottom first: (layer, its packages and top-level modules, the layers it may import).
#: A package imports its own modules, its own layer's and those of the layers named; nothing else.
#: The node side (area code, probes) and the judging side (judging core, judges) meet only in
#: ``contracts``: no probe imports a judge, no judge a probe. docs/ARCHITECTURE.md draws the same table.
LAYERS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("leaves", ("units", "errors", "testhooks", "timelimits", "signing"), ()),
    ("contracts", ("contracts",), ("leaves",)),
    ("area code", ("nccl", "fabric", "training", "inference"), ("leaves", "contracts")),
    ("probes", ("probes",), ("leaves", "contracts", "area code")),
    ("results", ("results", "thresholds"), ("leaves", "contracts")),
    ("judging core", ("judging",), ("leaves", "contracts", "results")),
    ("judges", ("verdicts",), ("leaves", "contracts", "area code", "results", "judging core")),
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
    """``gpuaccept.nccl.plan`` -> ``nccl``; a top-level module (``gpuaccept.units``) is its own package;
    anything of the suite (``tests.acceptance.test_nccl``) is ``tests``, an unreadable dynamic import ``?``."""
    if module.startswith(UNREADABLE):
        return UNREADABLE
    parts = module.split(".")
    if parts[0] != "gpuaccept":
        return parts[0]
    return parts[1] if len(parts) > 1 else ""


def _package_imports(root: Path = PACKAGE.parent) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the imports that draw that arrow, every import counted;
    ``root`` holds the ``gpuaccept`` tree (this repository's, or a tmp tree the checks are tried on)."""
    modules = MODULES if root == PACKAGE.parent else _modules(root)
    arrows: dict[tuple[str, str], list[str]] = {}
    for module, path in modules.items():
        for target in sorted(_imports(path, False, root)):  # a set: sorted, so a failure reads the same each run
            source, dest = _package(module), _package(target if target in modules else target.rsplit(".", 1)[0])
            if source and dest and source != dest:
                arrows.setdefault((source, dest), []).append(f"{module} -> {target}")
    return arrows


def _package_cycle(arrows: Iterable[tuple[str, str]]) -> list[str] | None:
    """A cycle in a graph of arrows (the first found, closed), or None: between packages, or between
    modules (``_module_arrows``)."""
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
        if dest == UNREADABLE:
            wrong += [f"{w} (an import the house check cannot read: name its module in a constant)" for w in why]
        elif dest == "tests":
            wrong += [f"{w} (gpuaccept imports no test: the suite sits above every layer)" for w in why]
        elif source not in LAYER_OF or dest not in LAYER_OF:
            wrong.append(f"{source} -> {dest}: place {source if source not in LAYER_OF else dest} in LAYERS")
        elif LAYER_OF[dest] not in MAY_IMPORT[LAYER_OF[source]]:
            wrong += [f"{w} ({LAYER_OF[source]} may not import {LAYER_OF[dest]})" for w in why]
    return wrong


def _module_arrows(root: Path = PACKAGE.parent) -> list[tuple[str, str]]:
    """(importing module, imported module) for every import between the modules under ``root``, in
    functions too: a late import hides a circle from the interpreter, not from a reader, and the tree
    holds none, so none may start."""
    modules = MODULES if root == PACKAGE.parent else _modules(root)
    return [(m, i) for m, p in modules.items() for i in sorted(_imports(p, False, root)) if i in modules and i != m]


def test_no_import_cycle() -> None:
    """No two files import each other, through any number of others, whether at import time or inside
    a function."""
    cycle = _package_cycle(_module_arrows())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


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


def test_tests_judge_nothing_themselves() -> None:
    """Tests ask, probes measure, ``gpuaccept/verdicts/`` judges: every acceptance test hands what it
    measured to its area's module there, which records every check (and which of them apply); a
    ``judge.check`` / ``expect`` / ``info`` / ``unreadable`` / ``stragglers`` / ``busy`` in a test is a second
    home of a verdict."""
    found = []
    for path in sorted(ACCEPTANCE.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.func if isinstance(node, ast.Call) else None
            if isinstance(call, ast.Attribute) and call.attr in RECORDING:
                owner = call.value.attr if isinstance(call.value, ast.Attribute) else getattr(call.value, "id", "")
                if owner == "judge":
                    found.append(f"{path.name}:{node.lineno} judge.{call.attr}")
    assert not found, found


# ---- the checks cannot be walked around ------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A ``gpuaccept`` tree under ``root`` made of ``files`` (path -> source), package ``__init__``s added."""
    for name, text in files.items():
        path = root / name
        for folder in path.relative_to(root).parents[:-1]:
            (root / folder).mkdir(parents=True, exist_ok=True)
            (root / folder / "__init__.py").touch()
        path.write_text(text)
    return root


def test_a_relative_import_is_held_to_the_layers(tmp_path: Path) -> None:
    """``from ..verdicts import nccl`` in a probe is the same upward import as its absolute spelling,
    whether at the top or inside a function; a relative import within a package draws no arrow."""
    root = _tree(
        tmp_path,
        {
            "gpuaccept/probes/membw.py": "from ..verdicts import nccl\n",
            "gpuaccept/probes/hostbw.py": "def main():\n    from .. import verdicts\n",
            "gpuaccept/probes/p2p.py": "from . import membw\nfrom ._protocol import emit\n",
            "gpuaccept/verdicts/nccl.py": "from ..contracts import judge\n",
        },
    )
    assert _against_layers(_package_imports(root)) == [
        "gpuaccept.probes.hostbw -> gpuaccept.verdicts (probes may not import judges)",
        "gpuaccept.probes.membw -> gpuaccept.verdicts (probes may not import judges)",
        "gpuaccept.probes.membw -> gpuaccept.verdicts.nccl (probes may not import judges)",
    ]
    assert ("probes", "probes") not in _package_imports(root)
    p2p = _source_imports("from . import membw\n", "gpuaccept.probes.p2p", False, False)
    assert p2p == {"gpuaccept.probes", "gpuaccept.probes.membw"}
    init = _source_imports("from .nccl import x\n", "gpuaccept.verdicts", True, False)
    assert init == {"gpuaccept.verdicts.nccl", "gpuaccept.verdicts.nccl.x"}


def test_a_dynamic_import_is_held_to_the_layers(tmp_path: Path) -> None:
    """``importlib.import_module`` / ``__import__`` count as imports: a constant name whole, an f-string
    or sum by its leading constant up to its last dot; a name the check cannot read fails, as does
    any import of the suite (``tests.*``) from gpuaccept."""
    root = _tree(
        tmp_path,
        {
            "gpuaccept/results/a.py": 'import importlib\nimportlib.import_module("gpuaccept.verdicts.nccl")\n',
            "gpuaccept/results/b.py": (
                'from importlib import import_module\ndef f(n):\n    import_module(f"gpuaccept.verdicts.{n}")\n'
            ),
            "gpuaccept/thresholds/c.py": 'def f(n):\n    __import__("tests.acceptance." + n)\n',
            "gpuaccept/thresholds/d.py": 'import importlib\ndef f(a, b):\n    importlib.import_module(f"{a}.{b}")\n',
            "gpuaccept/thresholds/e.py": 'import importlib\nimportlib.import_module("gpuaccept.contracts.judge")\n',
            "gpuaccept/verdicts/compute.py": "",
        },
    )
    assert _against_layers(_package_imports(root)) == [
        "gpuaccept.results.a -> gpuaccept.verdicts.nccl (results may not import judges)",
        "gpuaccept.results.b -> gpuaccept.verdicts (results may not import judges)",
        "gpuaccept.thresholds.d -> ?importlib.import_module(f'{a}.{b}') (an import the house check cannot read: "
        "name its module in a constant)",
        "gpuaccept.thresholds.c -> tests.acceptance (gpuaccept imports no test: the suite sits above every layer)",
    ]
    # and in this repository: the plugin's one dynamic import names its module
    assert "gpuaccept.report.plugin" in _imports(PACKAGE / "plugin.py", False)


def test_a_file_circle_fails_through_a_late_import(tmp_path: Path) -> None:
    """Two files importing each other fail, also when one side imports inside a function (as
    ``probes/container.py``'s ``main`` once imported ``_protocol``, which imported it); split what they
    share into a third and the circle is gone."""
    circle = {
        "gpuaccept/probes/_protocol.py": "from gpuaccept.probes.container import ran_in\n",
        "gpuaccept/probes/container.py": "def main():\n    from gpuaccept.probes._protocol import emit\n",
    }
    cycle = _package_cycle(_module_arrows(_tree(tmp_path / "circle", circle)))
    assert cycle == ["gpuaccept.probes._protocol", "gpuaccept.probes.container", "gpuaccept.probes._protocol"]
    split = {
        "gpuaccept/probes/_where.py": "",
        "gpuaccept/probes/_protocol.py": "from gpuaccept.probes._where import ran_in\n",
        "gpuaccept/probes/container.py": "from gpuaccept.probes._protocol import emit\n",
    }
    assert _package_cycle(_module_arrows(_tree(tmp_path / "split", split))) is None


def _tree_entries() -> dict[str, str]:
    """docs/ARCHITECTURE.md's tree of ``gpuaccept/``: each top-level entry (``plugin.py``, ``probes/``) and
    the text that describes it."""
    lines = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text().splitlines()
    start = lines.index("gpuaccept/")
    entries: dict[str, str] = {}
    name = ""
    for line in lines[start + 1 : start + lines[start:].index("```")]:
        head = re.match(r"^  ([a-z_]+/|[a-z_]+\.py|data/)", line)
        if head:
            name = head.group(1)
        entries[name] = entries.get(name, "") + " " + line
    return entries


def test_the_architecture_tree_names_every_module_and_nothing_else() -> None:
    """The tree a newcomer reads is the tree on disk: every top-level module and package, and every module
    of a package, named in its package's entry (``__init__`` and ``__main__`` need no words)."""
    tracked = [
        p.relative_to(PACKAGE.parent)
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", ".yaml", ".j2")
    ]
    entries = _tree_entries()
    tops = {p.parts[1] + ("/" if len(p.parts) > 2 else "") for p in tracked if p.name != "__init__.py"}
    assert set(entries) == tops, f"the tree and gpuaccept/ differ: {sorted(set(entries) ^ tops)}"
    missing = []
    for path in tracked:
        if len(path.parts) == 3 and path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            if not re.search(rf"\b{re.escape(path.name)}\b", entries[path.parts[1] + "/"]):
                missing.append(str(path))
    assert not missing, f"docs/ARCHITECTURE.md's tree does not name: {missing}"
