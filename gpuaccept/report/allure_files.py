"""The two files Allure reads beside the results: environment.properties and categories.json.

``environment.properties`` is the report's Overview "Environment" panel: what was tested (cluster,
nodes, GPU model) with which stack (driver, CUDA, NCCL, torch), by which suite version, against which
thresholds (their digest, so two reports judged by different numbers are told apart), and what changed
since the baseline. ``categories.json`` sorts failures by cause, which is what a customer asks first:
is it the hardware, the configuration, our measurement, or a slide since the last run?

The cause is not guessed here from the wording of a message: the judging core decides it from the
checks (``gpuaccept.judging.categories``) and the report plugin writes it at the head of the test's
status message in Allure, ``[threshold miss] 2 threshold miss(es): ...``. Each category below
matches one such prefix (Allure matches a category's regex against the whole status message with
Java's ``matches()`` and DOTALL), so the Allure tab, the run record and the summary page say the
same thing. Could-not-measure tests are *broken* in Allure, every other non-pass *failed*.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gpuaccept.judging.categories import CATEGORIES as CORE_CATEGORIES

__all__ = [
    "CATEGORIES",
    "CATEGORY_TITLES",
    "category_prefix",
    "environment",
    "read_environment",
    "write_categories",
    "write_environment",
]

#: The core's category -> what the Allure "Categories" tab and the summary page call it.
CATEGORY_TITLES: dict[str, str] = {
    "threshold miss": "Threshold miss",
    "hardware fault": "Hardware fault (ECC, XID, NVLink, IB, wrong results)",
    "drift": "Configuration drift (nodes disagree)",
    "regression": "Regression against the baseline run",
    "could not measure": "Could not measure (infrastructure)",
}
assert set(CATEGORY_TITLES) == set(CORE_CATEGORIES), "every category of the judging core needs a title"


def category_prefix(category: str) -> str:
    """``[threshold miss] ``: what the report plugin puts before a non-passed test's Allure message."""
    return f"[{category}] "


def _literal(category: str) -> str:
    """``\\[threshold miss\\]``: the prefix as a regex (the names are plain words, brackets need escaping)."""
    assert re.fullmatch(r"[a-z ]+", category), category
    return rf"\[{category}\]"


def _prefix_regex(category: str) -> str:
    return _literal(category) + ".*"


_KNOWN = "|".join(_literal(c) for c in CORE_CATEGORIES)

CATEGORIES: list[dict[str, Any]] = [
    *(
        {"name": CATEGORY_TITLES[name], "matchedStatuses": ["failed"], "messageRegex": _prefix_regex(name)}
        for name in ("hardware fault", "drift", "threshold miss", "regression")
    ),
    {
        "name": CATEGORY_TITLES["could not measure"],
        "matchedStatuses": ["broken"],
    },
    {
        # a failure the core did not sort (a test outside the acceptance suite, a plugin of a site's own)
        "name": "Other failed check",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?!(?:{_KNOWN})).*",
    },
]


def write_categories(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "categories.json"
    path.write_text(json.dumps(CATEGORIES, indent=2) + "\n")
    return path


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _gpu_model(fingerprint: Mapping[str, Any]) -> str | None:
    gpus = fingerprint.get("gpus") or {}
    names = sorted({str(d.get("name")) for d in gpus.get("devices") or []})
    if not names and gpus.get("count") == 0:
        return "no GPU"
    return f"{', '.join(names)} x{gpus.get('count')}" if names else None


def _cluster_name(cluster: Mapping[str, Any]) -> str:
    name = cluster.get("name") or os.environ.get("SLURM_CLUSTER_NAME")
    if name:
        return str(name)
    if cluster.get("launcher") == "local":
        return f"local machine {', '.join(cluster.get('nodes') or [])}".strip()
    if cluster.get("partition"):
        return f"Slurm cluster of partition {cluster['partition']}"
    return "unnamed Slurm cluster"


def _across(fingerprints: Mapping[str, Any], pick: Any) -> str:
    """One value if every node agrees, else ``value (node1, node2); other (node3)``: drift is visible."""
    by_value: dict[str, list[str]] = {}
    for node, fp in sorted(fingerprints.items()):
        if isinstance(fp, dict) and "error" not in fp:
            value = pick(fp)
            by_value.setdefault("none" if value in (None, "") else str(value), []).append(node)
    if not by_value:
        return "unknown"
    if len(by_value) == 1:
        return next(iter(by_value))
    return "; ".join(f"{value} ({', '.join(nodes)})" for value, nodes in by_value.items())


def _suite_version() -> str:
    try:
        return importlib.metadata.version("gpuaccept")
    except importlib.metadata.PackageNotFoundError:
        from gpuaccept import __version__

        return str(__version__)


def _short_list(items: list[str], keep: int = 12) -> str:
    return ", ".join(items) if len(items) <= keep else ", ".join(items[:keep]) + f", ... ({len(items)} in all)"


def environment(
    record: Mapping[str, Any],
    record_path: Path | None = None,
    *,
    baseline: str | None = None,
    changes: Iterable[str] = (),
    regressions: Iterable[str] = (),
) -> dict[str, str]:
    """The Environment panel as ordered key -> value (``record`` is ``RunRecord.to_dict()``)."""
    cluster = record.get("cluster") or {}
    fps = record.get("fingerprints") or {}
    nodes = [str(n) for n in cluster.get("nodes") or sorted(fps)]
    counts = record.get("counts") or {}
    skus = sorted({str(m.get("sku")) for m in record.get("metrics") or [] if m.get("sku")})
    thresholds = record.get("thresholds") or {}
    out = {
        "Cluster": _cluster_name(cluster),
        "Launcher": str(cluster.get("launcher") or "unknown"),
        "Partition": str(cluster.get("partition") or "default"),
        "Slurm job": str(cluster.get("job_id") or "none"),
        "Nodes": f"{len(nodes)}: {_short_list(nodes)}" if nodes else "none",
        "GPU model": _across(fps, _gpu_model),
        "SKU": ", ".join(skus) or "unknown",
        "Driver": _across(fps, lambda fp: _get(fp, ("gpus", "driver"))),
        "CUDA": _across(fps, lambda fp: _get(fp, ("gpus", "cuda_driver"))),
        "NCCL": _across(fps, lambda fp: _get(fp, ("stack", "nccl"))),
        "torch": _across(fps, lambda fp: _get(fp, ("stack", "torch"))),
        "Python": _across(fps, lambda fp: _get(fp, ("stack", "python"))),
        "Kernel": _across(fps, lambda fp: fp.get("kernel")),
        "OS": _across(fps, lambda fp: fp.get("os")),
        "Suite version": f"gpuaccept {_suite_version()}",
        "Thresholds digest": str(thresholds.get("digest") or "unknown"),
        "Thresholds files": ", ".join(Path(f).name for f in thresholds.get("files") or []) or "unknown",
        "Started": str(record.get("started", "")),
        "Status": str(record.get("status", "")),
        "Tests": ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "none",
    }
    if record_path is not None:
        out["Run record"] = str(record_path)
    if baseline is not None:
        regressed = list(regressions)
        out["Baseline"] = baseline
        out["Changes vs baseline"] = "; ".join(changes) or "none in driver, CUDA, NCCL, torch, kernel, OS, GPUs"
        out["Regressions vs baseline"] = f"{len(regressed)}" + (f": {_short_list(regressed, 5)}" if regressed else "")
    return out


def _escape(text: str, key: bool) -> str:
    """Java ``Properties`` escaping (ISO-8859-1 file: everything else as ``\\uXXXX``)."""
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char in "=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else "?")
        else:
            out.append(char)
    return "".join(out)


def write_environment(directory: Path, values: Mapping[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "environment.properties"
    lines = [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


_UNESCAPE = {"n": "\n", "t": "\t", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    """The inverse of ``_escape`` (and of Java's ``Properties.store`` for what it writes)."""
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 == len(text):
            out.append(char)
            index += 1
            continue
        nxt = text[index + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[index + 2 : index + 6]):
            out.append(chr(int(text[index + 2 : index + 6], 16)))
            index += 6
        else:
            out.append(_UNESCAPE.get(nxt, nxt))
            index += 2
    return "".join(out)


def read_environment(path: Path) -> dict[str, str]:
    """environment.properties as written by ``write_environment`` (``{}`` when there is none)."""
    if not path.is_file():
        return {}
    values: dict[str, str] = {}
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"((?:\\.|[^=\\])*)=(.*)", line)
        if match:
            values[_unescape(match.group(1))] = _unescape(match.group(2))
    return values
