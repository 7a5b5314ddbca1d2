"""The house rules a newcomer can rely on, held by CI: no import cycle between gpuaccept's modules nor
between its packages, every import running down the declared layers (``LAYERS``, drawn in
docs/ARCHITECTURE.md), no gpuaccept module importing the suite (``tests.*``), a judging core that imports
no domain (NCCL, fabric, hardware, training), and no module past 400 lines: a long module fails, to be
split by what it holds (into modules named for it), never squeezed under the number.

Imports are read from the source, outside ``if TYPE_CHECKING:``, every spelling counted: ``import``,
``from`` (a relative one resolved against the importing module's package), and dynamic imports:
``importlib.import_module`` / ``__import__`` however reached (aliased, through an aliased ``importlib``,
``getattr(importlib, "import_module")``, a name bound to one), the name positional or by keyword, a
relative name resolved against the package it is given, a constant name or an f-string's leading
constant. A name the check cannot read fails, as does an import function handed on unread
(``map(importlib.import_module, ...)``), so no spelling walks an import around the rules. Every check
counts every import, in functions too: a late import is still a dependency that runs one way or the
other, and a circle of files closed through a function's import still makes each file need the other
(the tree holds none)."""

from __future__ import annotations

import ast
import functools
import re
import shutil
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
#: the import functions: called by these names, as an attribute of anything (``importlib.``, an alias,
#: ``builtins.``), through ``getattr(..., "import_module")``, or through a name bound to one of them
_DYNAMIC = ("import_module", "__import__")
#: the modules that hold an import function: ``getattr`` on one of them with a name the check cannot read
#: may fetch one
_IMPORT_HOMES = ("importlib", "builtins")


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


class _Importers:
    """Which names of one module's source hold an import function (``import_module``, ``__import__`` and
    every alias: ``from importlib import import_module as im``, ``load = importlib.import_module``,
    ``load = getattr(importlib, "import_module")``), and which hold a module that holds one (``importlib``,
    ``builtins``, as imported or aliased). Read over the whole source, scopes ignored: a name that holds an
    import function anywhere is taken for one everywhere (too many imports found, never too few)."""

    def __init__(self, nodes: list[ast.AST]) -> None:
        """``nodes``: every node of the source (``ast.walk``'s)."""
        self.functions: set[str] = set(_DYNAMIC)
        self.homes: set[str] = set()
        assignments: list[tuple[str, ast.expr]] = []
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    if top in _IMPORT_HOMES and (alias.asname is None or alias.name == top):
                        self.homes.add(alias.asname or top)
            elif isinstance(node, ast.ImportFrom) and node.module in _IMPORT_HOMES and not node.level:
                self.functions.update(a.asname or a.name for a in node.names if a.name in _DYNAMIC)
            elif isinstance(node, ast.Assign):  # x = v, x: T = v, (x := v): a plain assignment to one name
                assignments += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
                assignments += [(node.target.id, node.value)] if node.value is not None else []
        changed = True
        while changed:  # an alias of an alias: until no assignment binds a new one
            changed = False
            for target, value in assignments:
                if self.is_function(value) and target not in self.functions:
                    self.functions.add(target)
                    changed = True
                elif isinstance(value, ast.Name) and value.id in self.homes and target not in self.homes:
                    self.homes.add(target)
                    changed = True
        #: the expressions an alias was bound from: a use the check has read, not an escape
        self.bound = {id(value) for _, value in assignments if self.is_function(value)}

    def is_function(self, node: ast.AST) -> bool:
        """Whether ``node`` is an import function: a name bound to one, ``<anything>.import_module``, or
        ``getattr(<anything>, "import_module")``."""
        if isinstance(node, ast.Name):
            return node.id in self.functions
        if isinstance(node, ast.Attribute):
            return node.attr in _DYNAMIC
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            name = node.args[1] if len(node.args) > 1 else None
            return isinstance(name, ast.Constant) and name.value in _DYNAMIC
        return False

    def is_unread_lookup(self, node: ast.AST) -> bool:
        """``getattr(importlib, <a name the check cannot read>)``: it may fetch an import function."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
            return False
        home, name = (*node.args[:2], None, None)[:2]
        return isinstance(home, ast.Name) and home.id in self.homes and not isinstance(name, ast.Constant)


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    """The argument of ``call`` at ``position`` or passed as ``keyword``; None when neither is given."""
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _package_named(node: ast.expr | None, module: str, is_package: bool) -> str | None:
    """The package ``import_module``'s ``package=`` names: a constant, or the importing module's own
    (``__package__``, ``__spec__.parent``; ``__name__`` is the module's name); None when the check cannot
    read it (or none is given)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    own = module if is_package else module.rpartition(".")[0]
    if isinstance(node, ast.Name) and node.id in ("__package__", "__name__"):
        return own if node.id == "__package__" else module
    if isinstance(node, ast.Attribute) and node.attr == "parent" and ast.unparse(node.value) == "__spec__":
        return own
    return None


def _dynamic_targets(call: ast.Call, module: str, is_package: bool) -> list[str]:
    """The modules an ``import_module(...)`` / ``__import__(...)`` call (``call.func`` is an import function)
    imports, as far as its arguments say, the name positional or ``name=``: a constant whole; an f-string or
    ``"..." + x`` up to the last dot of its leading constant (``f"gpuaccept.verdicts.{name}"`` is
    ``gpuaccept.verdicts``); a relative name (``import_module(".nccl", package=__package__)``,
    ``__import__("nccl", globals(), level=1)``) resolved against the package it names; ``__import__``'s
    ``fromlist`` names too. Else one ``UNREADABLE`` target, so a computed name cannot walk an import
    around the layers."""
    unreadable = [f"{UNREADABLE}{ast.unparse(call)}"]
    func = call.func
    is_dunder = (func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")) == "__import__"
    arg = _argument(call, 0, "name")
    whole = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    lead = arg if whole else arg.values[0] if isinstance(arg, ast.JoinedStr) and arg.values else None
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
        lead = arg.left
    if not (isinstance(lead, ast.Constant) and isinstance(lead.value, str)):
        return unreadable
    text: str = lead.value
    if is_dunder:  # __import__ names its level apart: level=1 is one leading dot
        level = _argument(call, 4, "level") or ast.Constant(0)
        if not (isinstance(level, ast.Constant) and isinstance(level.value, int)):
            return unreadable
        text = "." * level.value + text
        package: str | None = module if is_package else module.rpartition(".")[0]
    else:
        package = _package_named(_argument(call, 1, "package"), module, is_package)
    dots = len(text) - len(text.lstrip("."))
    rest = text[dots:]
    if not whole:  # a leading constant: the package up to its last dot, the rest unknown
        if "." not in rest and not dots:
            return unreadable
        rest = rest.rpartition(".")[0]
    if dots:
        bits = package.rsplit(".", dots - 1) if package else []
        if len(bits) < dots:
            return unreadable
        rest = ".".join(filter(None, (bits[0], rest)))
    if not whole and rest in FIRST_PARTY:  # f"gpuaccept.{name}": any package of gpuaccept, none placed
        return unreadable
    targets = [rest]
    fromlist = _argument(call, 3, "fromlist") if is_dunder else None
    if fromlist is not None and not (isinstance(fromlist, ast.Constant) and not fromlist.value):
        names = fromlist.elts if isinstance(fromlist, (ast.List, ast.Tuple)) else [fromlist]
        if not all(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in names):
            return unreadable
        targets += [f"{rest}.{n.value}" for n in names if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return targets


def _source_imports(source: str, module: str, is_package: bool, module_level: bool) -> set[str]:
    """Every first-party module ``source`` (the text of ``module``) imports: ``import``, ``from`` (relative
    ones resolved), and dynamic imports, whatever the import function is called; outside ``if TYPE_CHECKING:``.
    An import function the check sees used other than called or aliased (``map(importlib.import_module,
    names)``) is ``UNREADABLE``. ``module_level``: only what runs when the module is imported (not function
    bodies)."""
    found: set[str] = set()
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    importers = _Importers(nodes)
    read = importers.bound | {id(n.func) for n in nodes if isinstance(n, ast.Call)}

    def record(node: ast.AST) -> None:
        if isinstance(node, ast.ImportFrom):
            base = _absolute(node, module, is_package)
            if _first_party(base):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if _first_party(a.name))
        elif isinstance(node, ast.Call) and importers.is_function(node.func):
            targets = _dynamic_targets(node, module, is_package)
            found.update(t for t in targets if t.startswith(UNREADABLE) or _first_party(t))
        escapes = importers.is_function(node) and not isinstance(getattr(node, "ctx", None), ast.Store)
        if (escapes and id(node) not in read) or importers.is_unread_lookup(node):
            found.add(f"{UNREADABLE}{ast.unparse(node)}")

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            record(child)
            if module_level and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            visit(child)

    visit(tree)
    return found


@functools.cache  # each check reads the same tree: parsed once a session (a tmp tree's paths are its own)
def _imports(path: Path, module_level: bool, root: Path = PACKAGE.parent) -> frozenset[str]:
    return frozenset(_source_imports(path.read_text(), _name(path, root), path.name == "__init__.py", module_level))


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
    ("leaves", ("units", "errors", "selftest_hooks", "timelimits", "signing"), ()),
    ("contracts", ("contracts",), ("leaves",)),
    ("area code", ("nccl", "fabric", "training", "inference"), ("leaves", "contracts")),
    ("probes", ("probes",), ("leaves", "contracts", "area code")),
    ("results", ("results", "thresholds"), ("leaves", "contracts")),
    ("judging core", ("judging",), ("leaves", "contracts", "results")),
    ("judges", ("verdicts",), ("leaves", "contracts", "area code", "results", "judging core")),
    ("options", ("settings", "settings_doc", "markers", "hookspecs", "inputs"), ("leaves",)),
    (
        "launch",
        ("dispatch", "cluster", "fingerprints"),
        ("leaves", "contracts", "area code", "probes", "results", "options"),
    ),
    (
        "session",
        (
            "state",
            "stalls",
            "record_keeper",
            "fixtures",
            "startup",
            "fleet",
            "calibrate",
            "report",
            "nodecheck",
            "plugin",
        ),
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


def _long_modules(root: Path = PACKAGE.parent) -> list[str]:
    """Every module of the ``gpuaccept`` tree under ``root`` past ``LONG_MODULE`` lines, longest first,
    named with its length."""
    modules = MODULES if root == PACKAGE.parent else _modules(root)
    long = {m: n for m, p in modules.items() if (n := len(p.read_text().splitlines())) > LONG_MODULE}
    return [f"{m}: {n} lines" for m, n in sorted(long.items(), key=lambda item: -item[1])]


def test_no_module_is_long() -> None:
    """A module past 400 lines fails, named with its length: split it by what it holds (a probe's helpers
    into private modules named for them, ``probes/_coherency_locks.py``), never squeeze it under."""
    named = _long_modules()
    assert not named, f"over {LONG_MODULE} lines, split each by what it holds: " + "; ".join(named)


def test_a_long_module_is_caught(tmp_path: Path) -> None:
    """Tried in a temporary copy of this repository's ``gpuaccept/``: a module grown to 401 lines fails,
    named with its length; one of exactly 400 lines passes."""
    copy = tmp_path / "copy"
    shutil.copytree(PACKAGE, copy / "gpuaccept", ignore=shutil.ignore_patterns("__pycache__"))
    before = set(_long_modules(copy))
    (copy / "gpuaccept" / "results" / "at_the_limit.py").write_text("x = 1\n" * LONG_MODULE)
    (copy / "gpuaccept" / "results" / "past_the_limit.py").write_text("x = 1\n" * (LONG_MODULE + 1))
    assert set(_long_modules(copy)) - before == {f"gpuaccept.results.past_the_limit: {LONG_MODULE + 1} lines"}


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
                    found.append(f"{path.name}:{call.lineno} judge.{call.attr}")
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


#: one upward import (a results module importing a judge), in every spelling of a dynamic import the check
#: reads: the name relative to a package, passed by keyword, the import function aliased or held by an
#: aliased module, fetched through getattr, held by a name, ``__import__`` with a level and a fromlist
SPELLINGS = {
    "relative": 'import importlib\nimportlib.import_module("..verdicts.nccl", package=__package__)\n',
    "relative_to_a_constant": 'from importlib import import_module\nimport_module(".nccl", "gpuaccept.verdicts")\n',
    "keyword": 'import importlib\nimportlib.import_module(name="gpuaccept.verdicts.nccl")\n',
    "aliased_function": 'from importlib import import_module as im\nim("gpuaccept.verdicts.nccl")\n',
    "aliased_module": 'import importlib as il\ndef f():\n    il.import_module("gpuaccept.verdicts.nccl")\n',
    "through_getattr": 'import importlib\ngetattr(importlib, "import_module")("gpuaccept.verdicts.nccl")\n',
    "held_by_a_name": 'import importlib\nload = getattr(importlib, "import_module")\nload("gpuaccept.verdicts.nccl")\n',
    "dunder_relative": '__import__("verdicts", globals(), None, ["nccl"], level=2)\n',
    "dunder_of_builtins": 'import builtins as b\nb.__import__(name="gpuaccept.verdicts", fromlist=("nccl",))\n',
}


def test_every_spelling_of_a_dynamic_import_is_caught(tmp_path: Path) -> None:
    """Tried in a temporary copy of this repository's ``gpuaccept/``: each spelling of ``SPELLINGS`` added
    as a module of ``results/`` fails the layer check, and nothing else changes."""
    copy = tmp_path / "copy"
    shutil.copytree(PACKAGE, copy / "gpuaccept", ignore=shutil.ignore_patterns("__pycache__"))
    before = set(_against_layers(_package_imports(copy)))
    for name, source in SPELLINGS.items():
        (copy / "gpuaccept" / "results" / f"spelling_{name}.py").write_text(source)
    added = set(_against_layers(_package_imports(copy))) - before
    caught = {line.split(" -> ")[0].rpartition(".spelling_")[2] for line in added}
    assert caught == set(SPELLINGS), f"not caught: {sorted(set(SPELLINGS) - caught)}"
    assert all(line.endswith("(results may not import judges)") for line in added), sorted(added)
    for name in SPELLINGS:
        assert f"gpuaccept.results.spelling_{name} -> gpuaccept.verdicts.nccl (results may not import judges)" in added


@pytest.mark.parametrize(
    ("source", "imports"),
    [
        ('import importlib\nlist(map(importlib.import_module, ["gpuaccept.verdicts"]))\n', "?importlib.import_module"),
        ("import importlib as il\ndef f(n, x):\n    getattr(il, n)(x)\n", "?getattr(il, n)"),
        ('from importlib import import_module\nimport_module(".nccl")\n', "?import_module('.nccl')"),
        ('import importlib\nimportlib.import_module(".x", package=p)\n', "?importlib.import_module('.x', package=p)"),
        ('import importlib\nimportlib.import_module(f"gpuaccept.{n}")\n', "?importlib.import_module(f'gpuaccept.{n}')"),
        (
            'import importlib\nimportlib.import_module(f"..{n}", __package__)\n',
            "?importlib.import_module(f'..{n}', __package__)",
        ),
        ("__import__('gpuaccept', fromlist=names)\n", "?__import__('gpuaccept', fromlist=names)"),
        ("import importlib\nimportlib.import_module(**spec)\n", "?importlib.import_module(**spec)"),
    ],
)
def test_a_dynamic_import_the_check_cannot_read_fails(source: str, imports: str) -> None:
    """An import function used other than called or aliased, a ``getattr`` on ``importlib`` by a computed
    name, a relative name without a package the check reads, a computed name under ``gpuaccept.`` itself,
    a computed fromlist: each is one ``UNREADABLE`` import (in ``gpuaccept.probes.x``), which every layer fails."""
    assert _source_imports(source, "gpuaccept.probes.x", False, False) == {imports}


def test_a_readable_dynamic_import_resolves_like_its_static_spelling() -> None:
    """A relative name resolves against the package named (``__package__``, ``__spec__.parent``, a
    constant), ``__import__``'s fromlist names its modules, an f-string's leading constant names its package;
    ``importlib``'s other functions import nothing."""
    probe = ("gpuaccept.probes.x", False, False)
    read = {
        'import importlib\nimportlib.import_module(f".{n}", package=__spec__.parent)\n': {"gpuaccept.probes"},
        'import importlib\nimportlib.import_module("._gpu", __package__)\n': {"gpuaccept.probes._gpu"},
        "__import__('gpuaccept', fromlist=['units'])\n": {"gpuaccept", "gpuaccept.units"},
        "__import__('json', fromlist=[])\n": set(),
        'import importlib as il\nil.metadata.version("gpuaccept")\ngetattr(il, "util")\n': set(),
        'import importlib\ndef f(n):\n    importlib.import_module(f"gpuaccept.nccl.{n}")\n': {"gpuaccept.nccl"},
    }
    for source, imports in read.items():
        assert _source_imports(source, *probe) == imports, source
    init = _source_imports(
        'import importlib\nimportlib.import_module(".nccl", __name__)\n', "gpuaccept.verdicts", True, False
    )
    assert init == {"gpuaccept.verdicts.nccl"}


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
