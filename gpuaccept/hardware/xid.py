"""Parse NVIDIA Xid lines from a kernel log and judge them against the hardware-Xid list.

Formats understood (one event per line):
- dmesg:            ``[  966.503025] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: ...``
- journalctl -k:    ``Nov 22 18:29:55 host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', ...``
  (``-o short-monotonic`` puts ``[  966.503025]`` first instead of the wall-clock time)
- /dev/kmsg:        ``3,1234,966503025,-;NVRM: Xid (PCI:0000:18:00): 94, pid=..., Contained: ...``
- older drivers:    ``NVRM: Xid (0000:01:00): 31, Ch 0000000b, ...`` (no ``PCI:``)

Which codes count as hardware faults is not decided here: the list lives in thresholds.yaml with its
source (NVIDIA's Xid catalog) and reaches ``judge_xid`` from the test, so a site can extend it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuaccept.contracts.judge import JudgeLike, gpu_label
from gpuaccept.errors import MeasurementError

__all__ = ["XID_METRICS", "XidEvent", "hardware_codes", "judge_xid", "parse_line", "parse_log"]

#: what ``judge_xid`` judges: its test's ``@pytest.mark.judges``
XID_METRICS = ("xid_hardware_events", "xid_hardware_codes")

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
        """``0000:18:00``: domain, bus and device in the spelling ``_gpu.bus_key`` gives NVML addresses."""
        domain, bus, device = self.pci.lower().split(":")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


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


def hardware_codes(spec: Any) -> set[int]:
    """The hardware Xid codes from the ``xid_hardware_codes`` limit (a comma-separated ``equal`` string)."""
    if spec is None or spec.equal in (None, ""):
        raise MeasurementError("thresholds: no xid_hardware_codes list in force, so Xids cannot be classified")
    return {int(code) for code in str(spec.equal).replace(" ", "").split(",") if code}


def _bus_of(gpu: dict[str, Any]) -> str:
    parts = gpu["pci_bus_id"].lower().split(":")
    return f"{int(parts[-3], 16):04x}:{int(parts[-2], 16):02x}:{int(parts[-1].split('.')[0], 16):02x}"


def judge_xid(data: dict[str, Any], judge: JudgeLike, node: str, hardware: set[int]) -> list[XidEvent]:
    """Count hardware Xids per GPU since boot; an unreadable kernel log is an error, never a pass."""
    if not data.get("readable"):
        why = "; ".join(f"{src}: {msg}" for src, msg in (data.get("errors") or {}).items()) or "no source answered"
        judge.unreadable(
            "xid_hardware_events",
            f"the kernel log is unreadable, so Xid errors cannot be ruled out ({why}). Run the suite as a "
            "user that may read it (root, the systemd-journal group, or kernel.dmesg_restrict=0).",
            node=node,
        )
        return []
    events = parse_log(data.get("xid_lines") or [])
    gpus = {_bus_of(g): gpu_label(g) for g in data.get("gpus") or []}
    coverage = {"source": data.get("source"), "log_start_s": data.get("log_start_s"), "uptime_s": data.get("uptime_s")}
    by_gpu: dict[str, list[XidEvent]] = {label: [] for label in gpus.values() if label}
    for event in events:
        by_gpu.setdefault(gpus.get(event.bus) or f"unknown device {event.pci}", []).append(event)
    sent = len(data.get("xid_lines") or [])
    cut = (
        [f"only the last {sent} of {data['xid_lines_total']} Xid lines were sent"]
        if data.get("xid_lines_total", 0) > sent
        else []
    )
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
