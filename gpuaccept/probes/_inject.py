"""TEST HOOK, off by default: recorded or edited hardware readings instead of the hardware.

What DCGM's injection NVML (``dcgmi test --inject``) is to DCGM, this is to the probes: with
``GPUACCEPT_TEST_INJECT=<file.json>`` in the environment, the probes' reading points (NVML in
``gpu_health``, ``nvlink``, ``xid`` and ``fingerprint``; the InfiniBand sysfs tree in ``infiniband``,
``nvlink`` and ``fingerprint``; the kernel log in ``xid``; ``hygiene``'s /dev/shm figures) return the
readings the file names for *this* node instead of reading the hardware. Nothing else changes: the
probes emit what they always emit, the tests and the judging core judge it as they judge a live node.
The selftests use it to prove every row of docs/faults.md end to end on a loopback Slurm cluster
without GPUs (tests/selftest/test_faults_loopback.py). Never set it on a cluster you are accepting:
the run then judges the file, not the machine. It is registered in ``gpuaccept.selftest_hooks``: every
probe's result line names it, and a run with it set is never ACCEPTED (its record names the hook).

The file is read on the node, inside the probe (under srun), and keyed by the node's Slurm name
(``SLURMD_NODENAME``, else ``GPUACCEPT_NODE``), so one node can carry a fault while the others read the
healthy recording::

    {"readings": {                                   # every node
        "gpu_health": "/tmp/rec/gpu_health.json",                   # a `gpu_health --dump` file
        "nvlink": "/tmp/rec/nvlink.json",                           # a `nvlink --dump` file
        "kernel_log": "fixtures/kernel-log/dmesg-h100-clean.txt",     # a saved dmesg/journalctl/kmsg log
        "sysfs_root": "fixtures/sysfs/hgx-h100-ndr",                  # a recorded /sys tree
        "fabric": "fixtures/fabric/gb200-gpud-1106.json"},            # published NVML fabric fields per GPU
     "nodes": {"node2": {                            # this node only, over the readings above
        "gpus": {"1": {"ecc_uncorrected_volatile": 2, "nvlink.links.3.active": false}},
        "remove_gpus": [1],                          # GPUs NVML no longer lists (fallen off the bus)
        "set": {"gpu_health.driver": "570.124.06", "hygiene.dev_shm_free_gib": 0.01},
        "kernel_log_append": ["[ 8123.4] NVRM: Xid (PCI:0000:00:07): 79, ..."],
        "clock_offset_s": 600,                       # the node's wall clock runs this far ahead
        "sysfs": {"class/infiniband/mlx5_3/ports/1/rate": "200 Gb/sec (4X HDR)",
                  "class/infiniband/mlx5_7": null},          # null deletes (a missing HCA)
        "gdr_sysfs": {"module/nvidia_peermem": null}}}}   # over gdr_sysfs_root (and gdr_proc_root)

``readings`` may hold edits too (every node gets them); a node's ``gpus``, ``set``, ``sysfs`` and
``gdr_sysfs`` edits are laid over those key by key. ``gpus`` edits one GPU's entry (by NVML index) in
every NVML reading whose entry has the key's first part (dotted keys walk dicts and lists); ``set``
edits a whole reading (``<reading>.<key>``: gpu_health, nvlink, gdr, hygiene); ``sysfs`` and
``gdr_sysfs`` write files over a private copy of their tree (``_sysfs_copy`` lists the forms). Removed
GPUs leave the others their index. ``fabric`` (a ``fixtures/fabric/*.json`` file: each GPU's fields as
published, ``nvidia-smi -q``'s words or NVML's numbers) is served at the tool boundary: ``fabric_call`` is
``nvmlDeviceGetGpuFabricInfoV`` for those GPUs, writing the published fields into the caller's v3 struct and
leaving every unpublished one as the caller wrote it, so the probe's sentinel decode runs on them
(``set: {"fabric.gpus.1.cliqueId": 7}`` edits one). Relative paths are relative to the file. A broken file is an error
naming the file and the key, never a
silent fall-back to the hardware.
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from gpuaccept import selftest_hooks
from gpuaccept.probes._protocol import node_name

__all__ = [
    "ENV",
    "InjectError",
    "clock_offset_s",
    "edited",
    "fabric_call",
    "fabric_gpus",
    "gdr_roots",
    "gpus",
    "kernel_log",
    "reading",
    "sysfs_root",
    "values",
]

ENV = "GPUACCEPT_TEST_INJECT"
READINGS = ("gpu_health", "nvlink", "kernel_log", "sysfs_root", "gdr_sysfs_root", "gdr_proc_root", "fabric")
NODE_KEYS = {*READINGS, "gpus", "remove_gpus", "set", "kernel_log_append", "sysfs", "gdr_sysfs", "clock_offset_s"}


class InjectError(RuntimeError):
    """The injection file is unreadable or names something that does not exist."""


@functools.cache
def _plan(path: str, node: str) -> dict[str, Any]:
    """This node's readings: the file's ``readings`` with ``nodes[<node>]`` over them."""
    where = Path(path)
    try:
        spec = json.loads(where.read_text())
    except (OSError, ValueError) as exc:
        raise InjectError(f"{ENV}={path}: {exc}") from exc
    unknown = set(spec) - {"readings", "nodes"}
    if unknown:
        raise InjectError(f"{ENV}={path}: unknown key(s) {sorted(unknown)} (readings, nodes)")
    plan: dict[str, Any] = copy.deepcopy(spec.get("readings") or {})
    for key, value in ((spec.get("nodes") or {}).get(node) or {}).items():
        if key == "gpus":  # per GPU, the node's edits over the common ones
            for index, edits in value.items():
                plan.setdefault("gpus", {}).setdefault(str(index), {}).update(edits)
        elif key in ("set", "sysfs", "gdr_sysfs"):
            plan.setdefault(key, {}).update(value)
        else:
            plan[key] = value
    bad = set(plan) - NODE_KEYS
    if bad:
        raise InjectError(f"{ENV}={path}: unknown key(s) {sorted(bad)} for {node} (one of {sorted(NODE_KEYS)})")
    for key in READINGS:
        if key in plan:
            plan[key] = where.parent / plan[key]
            if not plan[key].exists():
                raise InjectError(f"{ENV}={path}: {key} of {node}: {plan[key]} does not exist")
    return plan


def _active() -> dict[str, Any] | None:
    path = selftest_hooks.value(ENV)
    return _plan(path, node_name()) if path else None


def _walk_set(target: Any, dotted: str, value: Any, origin: str) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        try:
            target = target[int(part)] if isinstance(target, list) else target[part]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise InjectError(f"{ENV}: {origin}: no '{part}' in '{dotted}'") from exc
    last = parts[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


def reading(name: str) -> dict[str, Any] | None:
    """The ``gpu_health`` or ``nvlink`` reading of this node with its edits, or None (read the hardware)."""
    plan = _active()
    if plan is None or name not in plan:
        return None
    data = edited(name, json.loads(Path(plan[name]).read_text()))
    entries = {str(g.get("index")): g for g in data.get("gpus") or []}
    for index, edits in (plan.get("gpus") or {}).items():
        if index not in entries:
            raise InjectError(f"{ENV}: gpus: no GPU {index} in the {name} reading {plan[name]}")
        for dotted, value in edits.items():
            if dotted.split(".")[0] in entries[index]:
                _walk_set(entries[index], dotted, copy.deepcopy(value), f"GPU {index} {dotted}")
    removed = {int(i) for i in plan.get("remove_gpus") or []}
    if removed:
        data["gpus"] = [g for g in data.get("gpus") or [] if g.get("index") not in removed]
        if "pairs" in data:
            data["pairs"] = [p for p in data["pairs"] if p.get("a") not in removed and p.get("b") not in removed]
    return data


def edited(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a probe's reading) with this node's ``set`` edits ``<name>.<dotted key>`` applied."""
    plan = _active()
    for dotted, value in ((plan or {}).get("set") or {}).items():
        head, _, rest = dotted.partition(".")
        if head == name:
            _walk_set(data, rest, copy.deepcopy(value), f"set {dotted}")
    return data


def gpus() -> list[dict[str, Any]] | None:
    """The GPUs NVML lists on this node (index, uuid, PCI bus, name) per the injected readings, or None."""
    data = reading("gpu_health")
    if data is None:
        return None
    return [{k: g.get(k) for k in ("index", "uuid", "pci_bus_id", "name")} for g in data.get("gpus") or []]


def kernel_log() -> tuple[str, str] | None:
    """(source, text) of the injected kernel log with its appended lines, or None (read the live log)."""
    plan = _active()
    if plan is None or "kernel_log" not in plan:
        return None
    text = Path(plan["kernel_log"]).read_text(errors="replace")
    extra = plan.get("kernel_log_append") or []
    if extra:
        text = text.rstrip("\n") + "\n" + "\n".join(extra) + "\n"
    return f"injected:{plan['kernel_log']}", text


def sysfs_root(default: Path) -> Path:
    """The injected sysfs tree (a private copy with its edited files) in place of ``/sys``, else ``default``."""
    plan = _active()
    if plan is None or "sysfs_root" not in plan or default != Path("/sys"):
        return default
    return _tree(plan, "sysfs_root", "sysfs")


def gdr_roots(root: Path, proc: Path) -> tuple[Path, Path]:
    """The GPUDirect probe's PCI sysfs tree (with its ``gdr_sysfs`` edits) and /proc, in place of the live ones."""
    plan = _active()
    if plan is None or "gdr_sysfs_root" not in plan or root != Path("/sys"):
        return root, proc
    return _tree(plan, "gdr_sysfs_root", "gdr_sysfs"), Path(plan.get("gdr_proc_root") or proc)


def _tree(plan: dict[str, Any], root_key: str, edits_key: str) -> Path:
    edits = plan.get(edits_key) or {}
    if not edits:
        return Path(plan[root_key])
    frozen = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in edits.items()))
    return _sysfs_copy(Path(plan[root_key]), frozen)


@functools.cache
def _sysfs_copy(root: Path, edits: tuple[tuple[str, str], ...]) -> Path:
    """A private copy of ``root`` with ``edits`` (JSON values) written over it, removed at exit: a string is
    the file's text, null deletes, ``{"truncate": N}`` keeps the first N bytes (a config space read as
    non-root), ``{"at": OFFSET, "hex": "1d00"}`` overwrites bytes (a register in a binary config space)."""
    copy_root = Path(tempfile.mkdtemp(prefix="gpuaccept-inject-"))
    atexit.register(shutil.rmtree, copy_root, True)
    shutil.copytree(root, copy_root / "sys", symlinks=True)
    for rel, raw in edits:
        content = json.loads(raw)
        target = copy_root / "sys" / rel
        if not target.parent.is_dir():
            raise InjectError(f"{ENV}: sysfs {rel}: {target.parent.relative_to(copy_root / 'sys')} is not in the tree")
        if content is None:
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        elif isinstance(content, dict) and "truncate" in content:
            target.write_bytes(target.read_bytes()[: int(content["truncate"])])
        elif isinstance(content, dict) and "at" in content:
            data = bytearray(target.read_bytes())
            patch = bytes.fromhex(content["hex"])
            data[int(content["at"]) : int(content["at"]) + len(patch)] = patch
            target.write_bytes(bytes(data))
        else:
            target.write_text(f"{content}\n")
    return copy_root / "sys"


def values(probe: str) -> dict[str, Any]:
    """``set`` entries for a probe without a reading file (``hygiene.dev_shm_free_gib``): key -> value."""
    plan = _active()
    if plan is None:
        return {}
    prefix = probe + "."
    return {k[len(prefix) :]: v for k, v in (plan.get("set") or {}).items() if k.startswith(prefix)}


def clock_offset_s() -> float:
    """Seconds this node's wall clock is set ahead (negative: behind), as ``faketime`` would; 0 when off."""
    plan = _active()
    return float((plan or {}).get("clock_offset_s") or 0.0)


# ---- the NVML fabric call (probes/_fabric_state.py), served from published fields -------------------------

#: nvidia-smi -q's words for NVML's fabric codes (nvml.h NVML_GPU_FABRIC_STATE_*, nvmlReturn_t,
#: NVML_GPU_FABRIC_HEALTH_SUMMARY_*), matched case-insensitively; a recording may give the number instead
FABRIC_STATES = {"not supported": 0, "not started": 1, "in progress": 2, "completed": 3}
FABRIC_STATUSES = {"success": 0, "not supported": 3, "insufficient resources": 23, "unknown error": 999}
FABRIC_SUMMARIES = {"not supported": 0, "n/a": 0, "healthy": 1, "unhealthy": 2, "limited capacity": 3}
#: nvidia-smi -q's Fabric > Health rows: (bit shift in healthMask, words -> 2-bit value); NVML's encoding is
#: 0 not supported, 1 true (the condition holds), 2 false (NVML_GPU_FABRIC_HEALTH_MASK_*); "Bandwidth: Full"
#: is DEGRADED_BW false
_TRUE_FALSE = {"not supported": 0, "n/a": 0, "true": 1, "false": 2}
FABRIC_HEALTH_ROWS: dict[str, tuple[int, dict[str, int]]] = {
    "bandwidth": (0, {"not supported": 0, "n/a": 0, "degraded": 1, "full": 2}),
    "route_recovery_in_progress": (2, _TRUE_FALSE),
    "route_unhealthy": (4, _TRUE_FALSE),
    "access_timeout_recovery": (6, _TRUE_FALSE),
}


def _fabric_reading() -> dict[str, Any] | None:
    plan = _active()
    if plan is None or "fabric" not in plan:
        return None
    return edited("fabric", json.loads(Path(plan["fabric"]).read_text()))


def fabric_gpus() -> list[tuple[int, str | None]]:
    """(index, UUID) of each GPU the injected fabric reading lists."""
    data = _fabric_reading() or {}
    return [(int(g["index"]), g.get("uuid")) for g in data.get("gpus") or []]


def _code(table: dict[str, int], value: Any, what: str) -> int:
    if isinstance(value, int):
        return value
    try:
        return table[str(value).strip().lower()]
    except KeyError:
        raise InjectError(f"{ENV}: fabric {what} {value!r}: not one of {sorted(table)}") from None


def _health_mask(rows: dict[str, str]) -> int:
    mask = 0
    for row, word in rows.items():
        if row not in FABRIC_HEALTH_ROWS:
            raise InjectError(f"{ENV}: fabric health row {row!r}: not one of {sorted(FABRIC_HEALTH_ROWS)}")
        shift, table = FABRIC_HEALTH_ROWS[row]
        mask |= _code(table, word, f"health.{row}") << shift
    return mask


def fabric_call() -> Any | None:
    """``nvmlDeviceGetGpuFabricInfoV(handle, byref(struct))`` for the injected GPUs (the handle is the GPU's
    index), or None (call NVML). It writes only the fields the recording publishes, NVML's codes for its words;
    a GPU whose recording sets ``returned`` to an NVML error name raises it as NVML would (a RuntimeError of
    that name)."""
    data = _fabric_reading()
    if data is None:
        return None
    by_index = {int(g["index"]): g for g in data.get("gpus") or []}

    def call(handle: int, ref: Any) -> None:
        fields = by_index[int(handle)]
        if fields.get("returned", "NVML_SUCCESS") != "NVML_SUCCESS":
            raise type(str(fields["returned"]), (RuntimeError,), {})(fields["returned"])
        info = ref._obj
        if "state" in fields:
            info.state = _code(FABRIC_STATES, fields["state"], "state")
        if "status" in fields:
            info.status = _code(FABRIC_STATUSES, fields["status"], "status")
        if "cliqueId" in fields:
            info.cliqueId = int(fields["cliqueId"])
        if "clusterUuid" in fields:
            raw = bytes.fromhex(str(fields["clusterUuid"]).replace("-", ""))
            info.clusterUuid[:] = list(raw)
        if "healthSummary" in fields:
            info.healthSummary = _code(FABRIC_SUMMARIES, fields["healthSummary"], "healthSummary")
        if "healthMask" in fields:
            info.healthMask = int(str(fields["healthMask"]), 0)
        elif "health" in fields:
            info.healthMask = _health_mask(fields["health"])

    return call
