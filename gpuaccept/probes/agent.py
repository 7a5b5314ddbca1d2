"""The site's health agents on a node (BFX04: "Check that GPUd or Sentinel is running"): is each declared
agent's process running, does its URL answer, and does a DCGM exporter's metrics page list every GPU NVML
sees (an exporter that lost a GPU reports a healthy node while one of its GPUs goes unwatched).

An agent is given as ``--agent name=dcgm-exporter,process=dcgm-exporter,url=http://localhost:9400/metrics,
kind=dcgm-exporter`` (repeatable) or ``--agents JSON`` (a list of such objects). A process is found by its
``/proc/<pid>/comm`` (the kernel's 15-character name) or the basename of its ``cmdline``'s first word.

The exporter's page is Prometheus text; its ``DCGM_FI_DEV_*`` series carry the GPU as labels
(``gpu="0"``, ``UUID="GPU-..."``; dcgm-exporter's default-counters.csv, both the old and the newer metric
names, e.g. ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_GPU_TEMP``).
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaccept.contracts.tenant import AgentRecord, AgentState
from gpuaccept.probes._nvml import nvml, text
from gpuaccept.probes._protocol import emit
from gpuaccept.probes.software import dcgm_version

__all__ = ["collect", "exporter_gpus", "main", "parse_agent", "running_pids"]

#: a Prometheus sample line of a DCGM device field, with its label set
_SERIES = re.compile(r"^(DCGM_FI_(?:DEV|PROF)_[A-Z0-9_]+)\{([^}]*)\}")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
#: how long a URL may take to answer: a local agent answers in milliseconds, a hung one never
URL_TIMEOUT_S = 5.0


def parse_agent(spec: str) -> dict[str, str]:
    """``name=x,process=y,url=z,kind=k`` as a dict; ``name`` required."""
    fields = dict(part.split("=", 1) for part in spec.split(",") if "=" in part)
    if not fields.get("name"):
        raise ValueError(f"--agent {spec!r}: needs name=...")
    return fields


def running_pids(process: str, proc: str | Path = "/proc") -> list[int]:
    """Pids whose ``comm`` or first ``cmdline`` word's basename is ``process`` (comm is cut at 15 chars)."""
    found: list[int] = []
    for entry in Path(proc).iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if comm == process[:15] or Path(argv0).name == process:
            found.append(int(entry.name))
    return sorted(found)


def exporter_gpus(page: str) -> tuple[list[str], list[str]]:
    """GPU indices and UUIDs the ``DCGM_FI_DEV_*`` series of a metrics page name, sorted and distinct."""
    indices: set[str] = set()
    uuids: set[str] = set()
    for line in page.splitlines():
        match = _SERIES.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        if "gpu" in labels:
            indices.add(labels["gpu"])
        uuid = labels.get("UUID") or labels.get("uuid")
        if uuid:
            uuids.add(uuid)
    return sorted(indices, key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v)), sorted(uuids)


def _fetch(url: str) -> tuple[int | None, str | None, str | None]:
    """HTTP status, body and error of a GET of ``url``."""
    try:
        with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as response:
            return int(response.status), response.read().decode(errors="replace"), None
    except urllib.error.HTTPError as exc:
        return int(exc.code), None, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, None, str(getattr(exc, "reason", exc))


def one_agent(decl: Mapping[str, Any], proc: str | Path = "/proc") -> AgentState:
    """One declared agent as this node runs it."""
    process, url, kind = decl.get("process"), decl.get("url"), decl.get("kind") or "generic"
    pids = running_pids(process, proc) if process else []
    state: dict[str, Any] = {
        "name": decl["name"],
        "kind": kind,
        "process": process,
        "running": bool(pids) if process else None,
        "pids": pids,
        "url": url,
        "answered": None,  # no URL declared
        "http_status": None,
        "error": None,
        "exporter_gpus": None,  # not an exporter, or its page was not read
        "exporter_uuids": None,
    }
    if url:
        status, body, error = _fetch(url)
        state.update(answered=status is not None and 200 <= status < 300, http_status=status, error=error)
        if kind == "dcgm-exporter" and body is not None:
            state["exporter_gpus"], state["exporter_uuids"] = exporter_gpus(body)
    return AgentState(**state)


def _nvml_gpus() -> tuple[int | None, list[str]]:
    lib = nvml()
    if lib is None:
        return None, []
    try:
        count = int(lib.nvmlDeviceGetCount())
        return count, [text(lib.nvmlDeviceGetUUID(lib.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
    except Exception:
        return None, []


def collect(agents: Sequence[Mapping[str, Any]], proc: str | Path = "/proc") -> AgentRecord:
    count, uuids = _nvml_gpus()
    return AgentRecord(
        agents=[one_agent(a, proc) for a in agents], nvml_gpus=count, nvml_uuids=uuids, dcgm_version=dcgm_version()
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gpuaccept.probes.agent", description=__doc__.split("\n")[0])
    parser.add_argument("--agent", action="append", default=[], help="name=...,process=...,url=...,kind=...")
    parser.add_argument("--agents", help="a JSON list of {name, process, url, kind}")
    args = parser.parse_args(argv)
    declared: list[dict[str, Any]] = [parse_agent(a) for a in args.agent]
    if args.agents:
        declared += json.loads(args.agents)
    emit(collect(declared).model_dump(mode="json"), probe="agent")


if __name__ == "__main__":
    main()
