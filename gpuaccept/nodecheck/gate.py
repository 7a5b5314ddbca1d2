"""What the node check judges between two jobs, and how its findings read: every check goes through the
suite's own judges (``gpuaccept/verdicts/``: ``gpu_health`` for the GPU count, ECC and row remaps, processes
outside every job and Xids; ``nvlink`` for links up and their replay and recovery counts; ``memory`` for the
PCIe replay counter's growth; ``infiniband`` whole; ``hygiene`` for the limits and /dev/shm; ``environment``
for the versions the accepted run had), with the same metrics, limits and sources as the acceptance tests,
so the gate has no rules of its own.

What it adds is only what a gate needs: which readings it judges and over which window (the counters and
log positions an earlier check kept); a check the node's SKU sets no limit for is not part of that SKU's
contract and is left out (the suite would call it unjudged: ``_Limited``); a reading that hung past the
watchdog is a finding that drains (a hung driver or filesystem is a node fault); a reading that could not
be taken for another reason is reported and does not drain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from gpuaccept.contracts.fabric import NvlinkErrors
from gpuaccept.contracts.judge import gpu_label
from gpuaccept.contracts.node import HygienePayload
from gpuaccept.contracts.payloads import GpuHealth, Sample
from gpuaccept.errors import MeasurementError
from gpuaccept.judging.judge import Judge
from gpuaccept.nodecheck.expected import GATED_FIELDS
from gpuaccept.nodecheck.watchdog import Outcome
from gpuaccept.results.metrics import MetricResult
from gpuaccept.verdicts.environment import judge_expected_versions
from gpuaccept.verdicts.gpu_health import (
    judge_foreign_processes,
    judge_gpu_count,
    judge_memory_errors,
    judge_xid,
    parse_log,
)
from gpuaccept.verdicts.hygiene import judge_dev_shm_free, judge_limits
from gpuaccept.verdicts.infiniband import expects_ib, judge_ib
from gpuaccept.verdicts.memory import judge_replay_window
from gpuaccept.verdicts.nvlink import judge_link_errors, judge_links_active

__all__ = ["MIN_REPLAY_WINDOW_S", "Finding", "Verdicts", "judge_node"]
#: the NVLink error counts the gate judges; CRC counts since boot are reported beside them, not judged
NVLINK_ERRORS = ("nvlink_replay_errors", "nvlink_recovery_errors")
#: the NVLink counters a check keeps in the node's state for the next one's since_last_check
KEPT_COUNTERS = ("crc_flit", "crc_data", "replay", "recovery")

#: the shortest window the PCIe replay rate is judged over: a Prolog seconds after an Epilog would turn
#: one retransmission into tens per minute; a shorter window is kept open until a later check
MIN_REPLAY_WINDOW_S = 60.0


@dataclass(frozen=True)
class Finding:
    """One thing wrong with the node: what, where, the value and what was expected."""

    check: str
    where: str
    value: str
    limit: str
    drains: bool

    def text(self) -> str:
        where = f" {self.where}" if self.where else ""
        return f"{self.check}{where} {self.value} (limit {self.limit})"


@dataclass
class Verdicts:
    """The judged checks and what they found."""

    results: list[MetricResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.drains]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if not f.drains]


def _short(result: MetricResult) -> str:
    """``GPU1`` for a GPU check (the index only: reasons are truncated), the component otherwise."""
    if result.subject is None:
        return ""
    if result.on_gpu:
        return f"GPU{result.subject.split(' ', 1)[0]}"
    return result.subject.replace(" port ", ":")


class _Node:
    """The judging of one node's readings (a helper holding the judge, the node and the verdicts)."""

    def __init__(self, judge: Judge, node: str, verdicts: Verdicts) -> None:
        self.judge, self.node, self.verdicts = judge, node, verdicts
        self.limited = _Limited(self)

    def declared(self, metric: str) -> bool:
        return self.judge.declared(metric, self.node) is not None

    def missing(self, check: str, where: str, why: str) -> None:
        self.verdicts.findings.append(Finding(check, where, "not read", why, drains=False))

    def quietly(self, check: str, call: Any, *args: Any) -> None:
        """Run one of the suite's judges; its checks are on the judge, its verdict is ours: a reading it
        could not take is a finding that does not drain."""
        before = len(self.judge.results)
        try:
            call(*args)
        except MeasurementError as exc:
            self.missing(check, "", str(exc).splitlines()[0][:200])
        for result in self.judge.results[before:]:
            if result.verdict == "unmeasured":
                self.missing(result.metric, _short(result), result.reason[:200])


class _Limited:
    """The judge the gate hands the suite's judges of limits it may not hold every SKU to (ECC, NVLink,
    the job-step limits): a metric the node's SKU sets no limit for is left out, and a reading not taken is
    a finding that does not drain (never recorded as a check). Everything else is the judge's own."""

    def __init__(self, n: _Node) -> None:
        self._n = n

    def check(self, metric: str, value: Any, *, node: str, gpu: str | None = None, **extra: Any) -> Any:
        if not self._n.declared(metric):
            return None
        if value is None:
            self._n.missing(metric, gpu or "", "the reading gave no value")
            return None
        return self._n.judge.check(metric, value, node=node, gpu=gpu, **extra)

    def unreadable(self, metric: str, why: str, *, node: str, gpu: str | None = None, **subject: Any) -> Any:
        if self._n.declared(metric):
            self._n.missing(metric, gpu or "", why)

    def expect(self, name: str, observed: Any, expected: Any, *, node: str, **extra: Any) -> Any:
        return self._n.judge.expect(name, observed, expected, node=node, **extra)

    def info(self, metric: str, value: Any, *, node: str, **extra: Any) -> Any:
        return self._n.judge.info(metric, value, node=node, **extra)

    def stragglers(self, metric: str) -> list[Any]:
        return self._n.judge.stragglers(metric)

    def busy(self, processes: str, *, node: str, gpu: Any) -> Any:
        return self._n.judge.busy(processes, node=node, gpu=gpu)

    def sku(self, node: str) -> str:
        return self._n.judge.sku(node)

    def datasheet(self, sku: str, name: str) -> float | None:
        return self._n.judge.datasheet(sku, name)

    def declared(self, metric: str, node: str, scale: int | None = None) -> Any:
        return self._n.judge.declared(metric, node, scale)

    def setting(self, name: str) -> float:
        return self._n.judge.setting(name)

    def tool_missing(self, check: str, tool: str, *, node: str, detail: str = "") -> None:
        self._n.judge.tool_missing(check, tool, node=node, detail=detail)


def _gpus(n: _Node, gpus: dict[str, Any], declared: int | None, context: str, job: str | None) -> None:
    if declared is None:
        n.missing("gpu_count", "", "the node's declared GPUs (gres) are unknown")
    else:
        n.quietly("gpu_count", judge_gpu_count, gpus, declared, n.judge, n.node)
    for gpu in gpus.get("gpus") or []:
        judge_memory_errors(gpu, n.limited, n.node)
        judge_foreign_processes(gpu, gpu["processes"], n.judge, n.node, context, job)


def _nvlink(n: _Node, gpus: dict[str, Any], boot: str, before: dict[str, Any]) -> dict[str, Any]:
    """Links up and replay/recovery counts per GPU (the suite's limits); the deltas since the last check
    ride along. Returns the counters to keep."""
    if not n.declared("nvlink_links_active"):
        return {}
    keep: dict[str, Any] = {}
    for gpu in gpus.get("gpus") or []:
        label, link = gpu_label(gpu), gpu.get("nvlink")
        if link is None:
            n.missing("nvlink_links_active", label or "", "no NVLink reading")
            continue
        judge_links_active(gpu, n.limited, n.node)
        if not link.get("active"):
            continue
        errors = link["errors"]
        # the counts an earlier check kept (none kept: each None, so since_last_check reads None)
        kept = {**dict.fromkeys(KEPT_COUNTERS), **(before.get(str(gpu["uuid"])) or {})}
        last = NvlinkErrors(
            crc_flit=kept["crc_flit"],
            crc_data=kept["crc_data"],
            replay=kept["replay"],
            recovery=kept["recovery"],
            ecc_data=None,  # not kept between checks (no limit reads it), nor the links' counts
            per_link={},
            unread_links={},
            source="per_link",
        )
        judge_link_errors(gpu, n.limited, n.node, NVLINK_ERRORS, last, crc_flit=errors["crc_flit"])
        keep[str(gpu["uuid"])] = {k: errors[k] for k in KEPT_COUNTERS if isinstance(errors[k], int)}
    return {"boot_id": boot, "counters": keep}


def _sample(gpu: GpuHealth, at: float) -> Sample:
    """The GPU's state at the check as a ``Sample`` (what ``judge_replay_window`` compares): its
    ``gpu_health`` reading at ``at`` (the readings' monotonic time)."""
    pcie = gpu["pcie"]
    return Sample(
        sm_clock_mhz=gpu["clocks"]["sm_clock_mhz"],
        mem_clock_mhz=gpu["clocks"]["mem_clock_mhz"],
        temperature_c=gpu["temperature_c"],
        power_w=gpu["power_w"],
        clock_event_reasons=gpu["clock_event_reasons"],
        pcie_gen=pcie["gen_current"],
        pcie_width=pcie["width_current"],
        pcie_replay_counter=pcie["replay_counter"],
        monotonic_s=at,
    )


def _pcie_replays(n: _Node, gpus: dict[str, Any], boot: str, before: dict[str, Any]) -> dict[str, Any]:
    """``pcie_replays_per_min`` per GPU: the counter's growth since the reading an earlier check kept (this
    boot), judged by the suite's ``judge_replay_window``. The first check opens the window; one shorter
    than ``MIN_REPLAY_WINDOW_S`` stays open for a later check. Returns the readings to keep."""
    if not n.declared("pcie_replays_per_min"):
        return {}
    keep: dict[str, Sample] = {}
    at = float(gpus.get("read_at_s") or 0.0)
    for gpu in gpus.get("gpus") or []:
        uuid, name = str(gpu["uuid"]), f"pcie_replays_per_min GPU{gpu['index']}"
        now = _sample(gpu, at)
        last: Sample | None = before.get(uuid)
        seconds = at - float(last.get("monotonic_s") or 0.0) if last else 0.0
        if last is None:
            n.verdicts.skipped.append(f"{name}: the window opens at this check")
        elif 0 <= seconds < MIN_REPLAY_WINDOW_S:
            n.verdicts.skipped.append(f"{name}: window {seconds:.0f} s, judged from {MIN_REPLAY_WINDOW_S:.0f} s")
            now = last
        else:
            n.quietly("pcie_replays_per_min", judge_replay_window, last, now, n.judge, n.node, gpu_label(gpu))
        keep[uuid] = now
    return {"boot_id": boot, "samples": keep}


def _xid(n: _Node, log: dict[str, Any], gpus: dict[str, Any], since: float | None) -> dict[str, Any] | None:
    """Hardware Xids in the window since the last passing check (or since boot), judged by ``judge_xid``.

    Returns the new position, or None to keep the old one: a window with a hardware Xid is judged again
    until an operator acknowledges it (``--acknowledge-xids``) or the node reboots, so the node stays
    drained rather than coming back once the line has scrolled out of the window.
    """
    if not n.declared("xid_hardware_codes"):
        return None
    events = parse_log(log.get("xid_lines") or [])
    window = [e.raw for e in events if since is None or e.uptime_s is None or e.uptime_s > since]
    data = {**log, "xid_lines": window, "gpus": gpus.get("gpus") or []}
    before = len(n.judge.results)
    n.quietly("xid_hardware_events", judge_xid, data, n.judge, n.node)
    mine = n.judge.results[before:]
    for result in mine:
        result.extra["window"] = "since boot" if since is None else f"since uptime {since:.0f} s"
    if not log.get("readable") or any(r.verdict == "fail" for r in mine):
        return None
    return {"boot_id": log.get("boot_id"), "uptime_s": log.get("uptime_s")}


def _ib(n: _Node, ib: dict[str, Any]) -> None:
    """The HCAs and ports, where the SKU expects InfiniBand or the node shows an HCA."""
    if expects_ib(n.judge, n.node) or ib.get("hcas"):
        n.quietly("ib_port_state", judge_ib, ib, n.judge, n.node)


def _hygiene(n: _Node, data: dict[str, Any], job: str | None) -> None:
    """/dev/shm size and ulimits always; /dev/shm free space only on a node no other job runs on (a
    running job's own files there are its business; what is left when none runs is a leftover)."""
    reading = cast(HygienePayload, data)  # the hygiene probe's collect (readers.read_hygiene adds "jobs")
    judge_limits(reading, n.limited, n.node)
    others = [j for j in data["jobs"] if j != job]
    if others:
        n.verdicts.skipped.append(f"dev_shm_free_gib: job(s) {', '.join(others)} running here")
    else:
        judge_dev_shm_free(reading, n.limited, n.node)


def _versions(n: _Node, expected: dict[str, Any], gpus: dict[str, Any], stack: dict[str, Any]) -> None:
    observed = {"driver": gpus.get("driver"), "CUDA": gpus.get("cuda_driver"), "NCCL": stack.get("nccl")}
    n.quietly("versions_consistent", judge_expected_versions, observed, expected, GATED_FIELDS, n.judge, n.node)


def judge_node(
    judge: Judge,
    node: str,
    outcomes: dict[str, Outcome],
    *,
    declared_gpus: int | None,
    context: str,
    job: str | None,
    saved: dict[str, dict[str, Any]],
) -> Verdicts:
    """Every check on the readings that came back; timeouts and reader failures become findings."""
    verdicts = Verdicts()
    n = _Node(judge, node, verdicts)
    for outcome in outcomes.values():
        if outcome.timed_out:
            verdicts.findings.append(Finding("timeout", outcome.name, outcome.step, f"{outcome.seconds:.1f} s", True))
        elif outcome.error:
            n.missing(outcome.name, "", outcome.error[:200])

    def data(name: str) -> dict[str, Any] | None:
        outcome = outcomes.get(name)
        return outcome.data if outcome is not None and outcome.ok and isinstance(outcome.data, dict) else None

    gpus = data("gpus")
    if gpus is not None:
        _gpus(n, gpus, declared_gpus, context, job)
        boot = (data("kernel_log") or {}).get("boot_id", "unknown")
        verdicts.state["nvlink"] = _nvlink(n, gpus, boot, (saved.get("nvlink") or {}).get("counters") or {})
        verdicts.state["pcie"] = _pcie_replays(n, gpus, boot, (saved.get("pcie") or {}).get("samples") or {})
        log = data("kernel_log")
        if log is not None:
            position = _xid(n, log, gpus, (saved.get("xid") or {}).get("uptime_s"))
            if position is not None:
                verdicts.state["xid"] = position
    if (ib := data("ib")) is not None:
        _ib(n, ib)
    if (hygiene := data("hygiene")) is not None:
        _hygiene(n, hygiene, job)
    expected = data("expected")
    if expected is None or expected.get("fields") is None:
        verdicts.skipped.append("versions: " + ((expected or {}).get("error") or "no expected fingerprint"))
    elif gpus is not None:
        _versions(n, expected["fields"], gpus, data("versions") or {})
    verdicts.results = list(judge.results)
    verdicts.findings += [
        Finding(r.metric, _short(r), str(r.value), r.limit_text(), True) for r in judge.results if r.verdict == "fail"
    ]
    return verdicts
