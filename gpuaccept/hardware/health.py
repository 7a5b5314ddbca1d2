"""Judge the ``gpu_health`` probe's NVML readings: memory, ECC, row remapping, clock events, PCIe, heat.

Which clock-event (throttle) reasons fail: hardware slowdown, hardware and software thermal slowdown
and hardware power brake mean the board cannot hold its clocks for a physical reason (cooling, power
delivery, a failing sensor); they fail. The rest (idle, software power cap, application or user clock
settings, sync boost, display clock) are normal operation and are only reported. Bit values are
NVML's ``nvmlClocksEventReason*`` constants.

PCIe: judged on the link's maximum (what GPU and slot can train to) against the SKU; the idle current
generation is reported only, because boards drop to Gen1 at idle to save power. The current link under
load is judged by the hostbw test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuaccept.contracts.judge import JudgeLike, gpu_label
from gpuaccept.contracts.payloads import GpuHealth, HealthRecord

__all__ = ["FAILING_REASONS", "HEALTH_METRICS", "REPORTED_REASONS", "decode_reasons", "judge_health", "memory_errors"]

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


def _checked(judge: JudgeLike, metric: str, value: Any, node: str, gpu: str | None, **extra: Any) -> None:
    """``judge.check`` unless the reading is missing; then record it unreadable (an error, never a pass)."""
    if value is None:
        judge.unreadable(metric, "NVML gave no value", node=node, gpu=gpu)
        return
    judge.check(metric, value, node=node, gpu=gpu, **extra)


def memory_errors(gpu: GpuHealth) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """One GPU's ECC and row-remap readings as (metric, value, extra): what this test and the node check
    (``nodecheck.verdicts``) both judge. None is a reading NVML did not give."""
    rows = gpu.get("remapped_rows")
    yield (
        "gpu_ecc_uncorrected_volatile",
        gpu.get("ecc_uncorrected_volatile"),
        {"corrected": gpu.get("ecc_corrected_volatile"), "aggregate": gpu.get("ecc_uncorrected_aggregate")},
    )
    yield (
        "gpu_remapped_rows_pending",
        None if rows is None else int(rows["pending"]),
        {"correctable": dict(rows or {}).get("correctable"), "uncorrectable": dict(rows or {}).get("uncorrectable")},
    )
    yield "gpu_remapped_rows_failed", None if rows is None else int(rows["failure"]), {}


def judge_gpu(gpu: GpuHealth, judge: JudgeLike, node: str) -> None:
    """Every health metric of one GPU."""
    label = gpu_label(gpu)
    errors = gpu.get("errors", {})
    mib = gpu.get("memory_total_mib")
    _checked(judge, "gpu_memory_total_gib", None if mib is None else round(mib / 1024, 2), node, label)
    ecc = gpu.get("ecc_mode_current")
    _checked(
        judge,
        "gpu_ecc_mode",
        None if ecc is None else ("Enabled" if ecc else "Disabled"),
        node,
        label,
        pending=gpu.get("ecc_mode_pending"),
    )
    for metric, value, extra in memory_errors(gpu):
        _checked(judge, metric, value, node, label, **extra)
    rows = gpu.get("remapped_rows")
    pending = gpu.get("retired_pages_pending")
    if pending is None and rows is not None:
        # Ampere and newer replaced page retirement with row remapping; NVML says "not supported".
        judge.info("gpu_retired_pages_pending", "n/a (row remapping)", node=node, gpu=label)
    else:
        _checked(judge, "gpu_retired_pages_pending", None if pending is None else int(pending), node, label)
    failing, reported = decode_reasons(gpu.get("clock_event_reasons"))
    if gpu.get("clock_event_reasons") is None:
        why = f"clock event reasons ({errors.get('clock_event_reasons', 'no value')})"
        judge.unreadable("gpu_clock_events_failing", why, node=node, gpu=label)
    else:
        judge.check(
            "gpu_clock_events_failing",
            "+".join(failing) or "none",
            node=node,
            gpu=label,
            mask=gpu["clock_event_reasons"],
        )
        judge.info("gpu_clock_events", "+".join(reported) or "none", node=node, gpu=label)
    pcie = gpu.get("pcie") or {}
    _checked(judge, "gpu_pcie_gen_max", pcie.get("gen_max"), node, label, gpu_max=pcie.get("gen_gpu_max"))
    _checked(judge, "gpu_pcie_width_max", pcie.get("width_max"), node, label)
    judge.info(
        "gpu_pcie_link_idle",
        f"Gen{pcie.get('gen_current')} x{pcie.get('width_current')}",
        node=node,
        gpu=label,
        replay_counter=pcie.get("replay_counter"),
    )
    temp, slowdown = gpu.get("temperature_c"), gpu.get("temperature_slowdown_c")
    if temp is not None:
        judge.info("gpu_temperature_c", temp, node=node, gpu=label, memory_c=gpu.get("memory_temperature_c"))
    _checked(
        judge,
        "gpu_temp_margin_c",
        None if temp is None or slowdown is None else slowdown - temp,
        node,
        label,
        temperature_c=temp,
        slowdown_c=slowdown,
    )
    if gpu.get("power_w") is not None:
        judge.info("gpu_power_w", gpu["power_w"], node=node, gpu=label)
    _checked(
        judge,
        "gpu_power_limit_w",
        gpu.get("power_limit_w"),
        node,
        label,
        default_w=gpu.get("power_default_limit_w"),
    )
    persistence = gpu.get("persistence_mode")
    judge.info(
        "gpu_persistence_mode",
        {None: "unknown", 0: "Disabled", 1: "Enabled"}.get(persistence, persistence),
        node=node,
        gpu=label,
    )
    procs = gpu.get("processes") or []
    judge.info(
        "gpu_processes",
        len(procs),
        node=node,
        gpu=label,
        processes=[f"{p['pid']} {p.get('name')} ({p.get('used_mib')} MiB)" for p in procs],
    )


def judge_health(data: HealthRecord, judge: JudgeLike, node: str, declared_gpus: int) -> None:
    """Judge a node's ``gpu_health`` record: every GPU the node declares is there, one model, and each
    GPU's health readings."""
    gpus = data.get("gpus") or []
    if not data.get("nvml", True):
        judge.unreadable("gpu_count", "NVML could not be initialised (no driver, or nvidia-ml-py missing)", node=node)
    shown = ", ".join(str(gpu_label(g)) for g in gpus) or "none"
    judge.expect("gpu_count", len(gpus), declared_gpus, node=node, shown=shown)
    if data.get("driver"):
        judge.info("gpu_driver_version", data["driver"], node=node)
        judge.info("gpu_cuda_driver_version", data.get("cuda_driver"), node=node)
    if len(gpus) > 1:  # one GPU is one model: nothing to compare
        names = sorted({str(g.get("name")) for g in gpus})
        judge.expect("gpu_models", len(names), 1, node=node, models=names)
    for gpu in gpus:
        judge_gpu(gpu, judge, node)
