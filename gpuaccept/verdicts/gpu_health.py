"""GPU health, its one home: the ``gpu_health`` probe's NVML readings (memory, ECC, row remapping, clock
events, PCIe, heat), the GPUs a node shows against those it declares, and the NVIDIA Xid lines of its
kernel log. The acceptance tests (``test_gpu_health``, ``test_xid``) and the node check
(``nodecheck.gate``: ECC and row remaps, the GPU count, processes outside every job, Xids) call the same
judges here.

Which clock-event (throttle) reasons fail: hardware slowdown, hardware and software thermal slowdown
and hardware power brake mean the board cannot hold its clocks for a physical reason (cooling, power
delivery, a failing sensor); they fail. The rest (idle, software power cap, application or user clock
settings, sync boost, display clock) are normal operation and are only reported. Bit values are
NVML's ``nvmlClocksEventReason*`` constants.

PCIe: judged on the link's maximum (what GPU and slot can train to) against the SKU; the idle current
generation is reported only, because boards drop to Gen1 at idle to save power. The current link under
load is judged by the hostbw test.

Xid lines, one event per line, in each format a kernel log comes in:

- dmesg:            ``[  966.503025] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: ...``
- journalctl -k:    ``Nov 22 18:29:55 host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', ...``
  (``-o short-monotonic`` puts ``[  966.503025]`` first instead of the wall-clock time)
- /dev/kmsg:        ``3,1234,966503025,-;NVRM: Xid (PCI:0000:18:00): 94, pid=..., Contained: ...``
- older drivers:    ``NVRM: Xid (0000:01:00): 31, Ch 0000000b, ...`` (no ``PCI:``)

Which codes count as hardware faults is not decided here: the list lives in thresholds.yaml with its
source (NVIDIA's Xid catalog), as the SKU's ``xid_hardware_codes`` limit, so a site can extend it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaccept.contracts.fabric import NvlinkPayload
from gpuaccept.contracts.judge import JudgeLike, gpu_label
from gpuaccept.contracts.node import JobProcess, XidPayload
from gpuaccept.contracts.payloads import GpuHealth, GpuIdentity, HealthRecord
from gpuaccept.fabric.affinity import bus_key

__all__ = [
    "FAILING_REASONS",
    "HEALTH_METRICS",
    "REPORTED_REASONS",
    "XID_METRICS",
    "XidEvent",
    "decode_reasons",
    "hardware_codes",
    "judge_foreign_processes",
    "judge_gpu_count",
    "judge_health",
    "judge_memory_errors",
    "judge_xid",
    "parse_line",
    "parse_log",
]

#: what ``judge_health`` judges: its test's ``@pytest.mark.judges``
HEALTH_METRICS = (
    "gpu_memory_total_gib",
    "gpu_ecc_mode",
    "gpu_ecc_uncorrected_volatile",
    "gpu_remapped_rows_pending",
    "gpu_remapped_rows_failed",
    "gpu_clock_events_failing",
    "gpu_pcie_gen_max",
    "gpu_pcie_width_max",
    "gpu_temp_margin_c",
    "gpu_power_limit_w",
)
#: what ``judge_xid`` judges: its test's ``@pytest.mark.judges``
XID_METRICS = ("xid_hardware_events", "xid_hardware_codes")

FAILING_REASONS: dict[int, str] = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
REPORTED_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x10: "sync_boost",
    0x100: "display_clock_setting",
}


def decode_reasons(mask: int | None) -> tuple[list[str], list[str]]:
    """(failing, reported) reason names set in an NVML clock-event bitmask; unknown bits are reported."""
    if mask is None:
        return [], []
    failing = [name for bit, name in FAILING_REASONS.items() if mask & bit]
    reported = [name for bit, name in REPORTED_REASONS.items() if mask & bit]
    unknown = mask & ~(sum(FAILING_REASONS) | sum(REPORTED_REASONS))
    if unknown:
        reported.append(f"other(0x{unknown:x})")
    return failing, reported


def _checked(judge: JudgeLike, metric: str, value: Any, node: str, gpu: str | None, why: str, **extra: Any) -> None:
    """``judge.check``; a missing reading goes with ``why`` (NVML's error, which the payload type makes the probe
    write beside every None): could not measure where the figure is judged, never a pass."""
    judge.check(metric, value, node=node, gpu=gpu, unread=f"NVML gave no value ({why})", **extra)


def _why(gpu: GpuHealth, reading: str) -> str:
    """NVML's error for a reading of ``gpu`` that is None (the payload type holds the probe to writing one)."""
    return gpu["errors"][reading] if reading in gpu["errors"] else "no error recorded"


def _memory_errors(gpu: GpuHealth) -> Iterator[tuple[str, Any, str, dict[str, Any]]]:
    """One GPU's ECC and row-remap readings as (metric, value, why None, extra)."""
    rows = gpu["remapped_rows"]
    yield (
        "gpu_ecc_uncorrected_volatile",
        gpu["ecc_uncorrected_volatile"],
        _why(gpu, "ecc_uncorrected_volatile"),
        {"corrected": gpu["ecc_corrected_volatile"], "aggregate": gpu["ecc_uncorrected_aggregate"]},
    )
    counts = {} if rows is None else {"correctable": rows["correctable"], "uncorrectable": rows["uncorrectable"]}
    pending = None if rows is None else int(rows["pending"])
    yield "gpu_remapped_rows_pending", pending, _why(gpu, "remapped_rows"), counts
    yield "gpu_remapped_rows_failed", None if rows is None else int(rows["failure"]), _why(gpu, "remapped_rows"), {}


def judge_memory_errors(gpu: GpuHealth, judge: JudgeLike, node: str) -> None:
    """One GPU's uncorrected ECC errors and pending or failed row remaps: judged by ``test_gpu_health`` and,
    between jobs, by the node check."""
    for metric, value, why, extra in _memory_errors(gpu):
        _checked(judge, metric, value, node, gpu_label(gpu), why, **extra)


def judge_gpu_count(data: HealthRecord | NvlinkPayload, declared_gpus: int, judge: JudgeLike, node: str) -> None:
    """Every GPU the node declares to Slurm is one NVML lists (``gpu_health``, ``nvlink`` and the node
    check's GPU readings all carry ``gpus`` and ``nvml``); NVML not answering at all is named apart."""
    if not data["nvml"]:
        judge.unreadable("gpu_count", "NVML could not be initialised (no driver, or nvidia-ml-py missing)", node=node)
    shown = ", ".join(str(gpu_label(g)) for g in data["gpus"]) or "none"
    judge.expect("gpu_count", len(data["gpus"]), declared_gpus, node=node, shown=shown)


def judge_foreign_processes(
    gpu: GpuIdentity, processes: Sequence[JobProcess], judge: JudgeLike, node: str, context: str, job: str | None
) -> None:
    """The node check's rule: no process on the GPU outside every Slurm job of the node; in an epilog,
    the ending job's own processes are leftovers too."""
    foreign = [p for p in processes if p["job"] is None or (context == "epilog" and p["job"] == job)]
    judge.expect(
        "gpu_foreign_processes",
        ", ".join(f"{p['pid']} {p['name']}" for p in foreign) or "none",
        "none",
        node=node,
        gpu=gpu_label(gpu),
        processes=list(processes),
    )


def judge_gpu(gpu: GpuHealth, judge: JudgeLike, node: str) -> None:
    """Every health metric of one GPU."""
    label = gpu_label(gpu)
    mib = gpu["memory_total_mib"]
    gib = None if mib is None else round(mib / 1024, 2)
    _checked(judge, "gpu_memory_total_gib", gib, node, label, _why(gpu, "memory_total_mib"))
    ecc = gpu["ecc_mode_current"]
    _checked(
        judge,
        "gpu_ecc_mode",
        None if ecc is None else ("Enabled" if ecc else "Disabled"),
        node,
        label,
        _why(gpu, "ecc_mode_current"),
        pending=gpu["ecc_mode_pending"],
    )
    judge_memory_errors(gpu, judge, node)
    pending = gpu["retired_pages_pending"]
    if pending is None and gpu["remapped_rows"] is not None:
        # Ampere and newer replaced page retirement with row remapping; NVML says "not supported".
        judge.info("gpu_retired_pages_pending", "n/a (row remapping)", node=node, gpu=label)
    else:
        retired = None if pending is None else int(pending)
        _checked(judge, "gpu_retired_pages_pending", retired, node, label, _why(gpu, "retired_pages_pending"))
    mask = gpu["clock_event_reasons"]
    if mask is None:
        why = f"clock event reasons ({_why(gpu, 'clock_event_reasons')})"
        judge.unreadable("gpu_clock_events_failing", why, node=node, gpu=label)
    else:
        failing, reported = decode_reasons(mask)
        judge.check("gpu_clock_events_failing", "+".join(failing) or "none", node=node, gpu=label, mask=mask)
        judge.info("gpu_clock_events", "+".join(reported) or "none", node=node, gpu=label)
    pcie = gpu["pcie"]
    gen_why, width_why = _why(gpu, "pcie.gen_max"), _why(gpu, "pcie.width_max")
    _checked(judge, "gpu_pcie_gen_max", pcie["gen_max"], node, label, gen_why, gpu_max=pcie["gen_gpu_max"])
    _checked(judge, "gpu_pcie_width_max", pcie["width_max"], node, label, width_why)
    judge.info(
        "gpu_pcie_link_idle",
        f"Gen{pcie['gen_current']} x{pcie['width_current']}",
        node=node,
        gpu=label,
        replay_counter=pcie["replay_counter"],
    )
    temp, slowdown = gpu["temperature_c"], gpu["temperature_slowdown_c"]
    if temp is not None:
        judge.info("gpu_temperature_c", temp, node=node, gpu=label, memory_c=gpu["memory_temperature_c"])
    _checked(
        judge,
        "gpu_temp_margin_c",
        None if temp is None or slowdown is None else slowdown - temp,
        node,
        label,
        _why(gpu, "temperature_c" if temp is None else "temperature_slowdown_c"),
        temperature_c=temp,
        slowdown_c=slowdown,
    )
    if gpu["power_w"] is not None:
        judge.info("gpu_power_w", gpu["power_w"], node=node, gpu=label)
    _checked(
        judge,
        "gpu_power_limit_w",
        gpu["power_limit_w"],
        node,
        label,
        _why(gpu, "power_limit_w"),
        default_w=gpu["power_default_limit_w"],
    )
    persistence = gpu["persistence_mode"]
    mode = _PERSISTENCE[persistence] if persistence in _PERSISTENCE else persistence
    judge.info("gpu_persistence_mode", mode, node=node, gpu=label)
    procs = gpu["processes"]
    judge.info(
        "gpu_processes",
        len(procs),
        node=node,
        gpu=label,
        processes=[f"{p['pid']} {p['name']} ({p['used_mib']} MiB)" for p in procs],
    )


#: NVML's persistence mode as the report names it
_PERSISTENCE: dict[int | None, str] = {None: "unknown", 0: "Disabled", 1: "Enabled"}


def judge_health(data: HealthRecord, judge: JudgeLike, node: str, declared_gpus: int) -> None:
    """Judge a node's ``gpu_health`` record: every GPU the node declares is there, one model, and each
    GPU's health readings."""
    gpus = data["gpus"]
    judge_gpu_count(data, declared_gpus, judge, node)
    if data["driver"]:
        judge.info("gpu_driver_version", data["driver"], node=node)
        judge.info("gpu_cuda_driver_version", data["cuda_driver"], node=node)
    if len(gpus) > 1:  # one GPU is one model: nothing to compare
        names = sorted({g["name"] for g in gpus})
        judge.expect("gpu_models", len(names), 1, node=node, models=names)
    for gpu in gpus:
        judge_gpu(gpu, judge, node)


# ---- Xids in the kernel log -------------------------------------------------------------------------

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?[^)]*\):\s*"
    r"(?P<code>\d+)\s*,?\s*(?P<rest>.*)$"
)
_PID = re.compile(r"pid=(?:'?<?)(?P<pid>[\w-]+)>?'?")
_MONO = re.compile(r"^\s*\[\s*(?P<s>\d+\.\d+)\]")
_KMSG = re.compile(r"^\d+,\d+,(?P<us>\d+),[^;]*;")
_WALL = re.compile(r"^(?P<when>(?:\d{4}-\d\d-\d\dT[\d:.+-]+)|(?:[A-Z][a-z]{2}\s+\d+\s+[\d:]+))\s")


@dataclass(frozen=True)
class XidEvent:
    """One Xid line: code, the GPU's PCI address as the driver wrote it, and when."""

    code: int
    pci: str
    pid: str | None
    message: str
    uptime_s: float | None
    when: str | None
    raw: str

    @property
    def bus(self) -> str:
        """``0000:18:00``: domain, bus and device in the one spelling NVML's addresses are compared in."""
        return bus_key(self.pci)


def parse_line(line: str) -> XidEvent | None:
    """The Xid event in one kernel-log line, or None if the line holds none."""
    match = _XID.search(line)
    if match is None:
        return None
    rest = match.group("rest").strip()
    pid = _PID.search(rest)
    uptime: float | None = None
    when: str | None = None
    if mono := _MONO.search(line):
        uptime = float(mono.group("s"))
    elif kmsg := _KMSG.search(line):
        uptime = int(kmsg.group("us")) / 1e6
    elif wall := _WALL.search(line):
        when = wall.group("when")
    message = _PID.sub("", rest, count=1).strip(" ,")
    return XidEvent(
        int(match.group("code")),
        match.group("pci"),
        pid.group("pid") if pid else None,
        message,
        uptime,
        when,
        line.rstrip("\n"),
    )


def parse_log(lines: list[str]) -> list[XidEvent]:
    return [event for line in lines if (event := parse_line(line)) is not None]


def hardware_codes(spec: Any) -> set[int] | None:
    """The hardware Xid codes from the ``xid_hardware_codes`` limit (a comma-separated ``equal`` string);
    None where no list is in force."""
    if spec is None or spec.equal in (None, ""):
        return None
    return {int(code) for code in str(spec.equal).replace(" ", "").split(",") if code}


def judge_xid(data: XidPayload, judge: JudgeLike, node: str) -> list[XidEvent]:
    """Count hardware Xids per GPU in the lines the probe sent (since boot; the node check sends the lines
    of its window), the hardware codes being the node SKU's ``xid_hardware_codes``; an unreadable kernel
    log is an error, never a pass."""
    hardware = hardware_codes(judge.declared("xid_hardware_codes", node))
    if hardware is None:
        why = "thresholds: no xid_hardware_codes list in force, so Xids cannot be classified"
        judge.unreadable("xid_hardware_events", why, node=node)
        return []
    if not data["readable"]:
        why = "; ".join(f"{src}: {msg}" for src, msg in data["errors"].items()) or "no source answered"
        judge.unreadable(
            "xid_hardware_events",
            f"the kernel log is unreadable, so Xid errors cannot be ruled out ({why}). Run the suite as a "
            "user that may read it (root, the systemd-journal group, or kernel.dmesg_restrict=0).",
            node=node,
        )
        return []
    events = parse_log(data["xid_lines"])
    gpus = {bus_key(g["pci_bus_id"]): gpu_label(g) for g in data["gpus"]}
    coverage = {"source": data["source"], "log_start_s": data["log_start_s"], "uptime_s": data["uptime_s"]}
    by_gpu: dict[str, list[XidEvent]] = {label: [] for label in gpus.values() if label}
    for event in events:
        label = (gpus[event.bus] if event.bus in gpus else None) or f"unknown device {event.pci}"
        by_gpu.setdefault(label, []).append(event)
    sent = len(data["xid_lines"])
    total = data["xid_lines_total"]
    cut = [f"only the last {sent} of {total} Xid lines were sent"] if total > sent else []
    for label, gpu_events in by_gpu.items():
        bad = [e for e in gpu_events if e.code in hardware]
        codes = dict(Counter(e.code for e in gpu_events))
        judge.info("xid_events", len(gpu_events), node=node, gpu=label, codes=codes, **coverage)
        judge.check(
            "xid_hardware_events",
            len(bad),
            node=node,
            gpu=label,
            codes=dict(Counter(e.code for e in bad)),
            lines=[e.raw for e in bad[-20:]],
            details=[f"Xid {e.code} {e.message[:160]}" for e in bad[-5:]] + (cut if bad else []),
        )
    if not by_gpu:
        judge.info("xid_events", 0, node=node, **coverage)
        judge.check("xid_hardware_events", 0, node=node)
    return events
