"""A fake NVML that answers from a recorded ``gpu_health --dump``: every getter a ``GpuHealth`` field declares
(``contracts/nvml.Nvml``) is answered from the field's recorded value, turned back into what NVML returns (the
marker's scale undone, its attribute or item rebuilt), and a recorded None is NVML's "not supported".

So a metric added as a contract field with its marker is answered here with no line written for it: the
value the recording holds is what the probe reads back (``test_adding_a_metric.py``). Readings that are not one
getter's value (identity, row remapping, clocks, processes, CPU affinity) are answered from the recording too.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pynvml  # type: ignore[import-untyped]

from gpuaccept.contracts.nvml import Nvml, nvml_fields
from gpuaccept.contracts.payloads import GpuHealth, PcieLink

__all__ = ["ReplayNVML"]


def _raw(value: Any, how: Nvml, kind: type[Any]) -> Any:
    """What NVML returns for a field's recorded ``value`` (``gpu_health._converted`` undone)."""
    if kind is bool:
        return int(value)
    if kind is str:
        return value
    raw = value / how.scale if how.scale != 1.0 else value
    return round(raw) if isinstance(value, int) or how.scale != 1.0 else raw


class ReplayNVML:
    """pynvml as the recorded node answered it: handles are GPU indices of ``recording["gpus"]``."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported

    def __init__(self, recording: dict[str, Any]) -> None:
        for name in dir(pynvml):
            if name.startswith("NVML_"):
                setattr(self, name, getattr(pynvml, name))
        self.recording = recording
        self.gpus: list[dict[str, Any]] = recording["gpus"]
        #: (getter, its constants' values) -> per GPU: the answer, or None for "not supported"
        self.answers: dict[tuple[str, tuple[int, ...]], list[Any]] = {}
        #: NVML field id -> per GPU value
        self.fields: dict[int, list[Any]] = {}
        for typed, part in ((GpuHealth, None), (PcieLink, "pcie")):
            for name, (how, kind) in nvml_fields(typed).items():
                values = [(g[part] if part else g)[name] for g in self.gpus]
                if how.field:
                    self.fields[getattr(pynvml, how.field)] = values
                    continue
                key = (how.call, tuple(getattr(pynvml, c) for c in how.consts))
                answers = self.answers.setdefault(key, [None] * len(self.gpus))
                for i, value in enumerate(values):
                    answers[i] = self._answer(answers[i], value, how, kind)

    @staticmethod
    def _answer(sofar: Any, value: Any, how: Nvml, kind: type[Any]) -> Any:
        if value is None:
            return sofar
        raw = _raw(value, how, kind)
        if how.item is not None:  # one getter's tuple, filled item by item (ECC mode current, pending)
            items = list(sofar or [])
            items += [None] * (how.item + 1 - len(items))
            items[how.item] = raw
            return items
        return types.SimpleNamespace(**{how.attr: raw}) if how.attr else raw

    def __getattr__(self, name: str) -> Callable[..., Any]:
        """A getter some ``Nvml`` marker names: answered from the recording; any other: not supported."""
        if not name.startswith("nvmlDevice"):
            raise AttributeError(name)

        def getter(handle: int, *args: int) -> Any:
            answers = self.answers.get((name, tuple(args)))
            if answers is None or answers[handle] is None:
                raise pynvml.NVMLError_NotSupported()
            return answers[handle]

        return getter

    # -- the node and the readings that are not one getter's value -------------------------------
    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.recording["driver"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        major, minor = str(self.recording["cuda_driver"]).split(".")
        return int(major) * 1000 + int(minor) * 10

    def nvmlSystemGetNVMLVersion(self) -> str:
        return str(self.recording["nvml_version"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return int(self.gpus[h]["index"])

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return str(self.gpus[h]["uuid"])

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return types.SimpleNamespace(busId=str(self.gpus[h]["pci_bus_id"]).encode())

    def nvmlDeviceGetName(self, h: int) -> str:
        return str(self.gpus[h]["name"])

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        rows = self.gpus[h]["remapped_rows"]
        if rows is None:
            raise pynvml.NVMLError_NotSupported()
        return rows["correctable"], rows["uncorrectable"], int(rows["pending"]), int(rows["failure"])

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        clocks = self.gpus[h]["clocks"]
        value = clocks["sm_clock_mhz"] if kind == pynvml.NVML_CLOCK_SM else clocks["mem_clock_mhz"]
        if value is None:
            raise pynvml.NVMLError_NotSupported()
        return int(value)

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int]) -> list[Any]:
        out = []
        for field in ids:
            value = self.fields[field][h] if field in self.fields else None
            answer = types.SimpleNamespace(iVal=value, dVal=value)
            out.append(types.SimpleNamespace(nvmlReturn=3 if value is None else 0, valueType=0, value=answer))
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [types.SimpleNamespace(pid=p["pid"], usedGpuMemory=None) for p in self.gpus[h]["processes"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return []

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        names = {p["pid"]: p["name"] for g in self.gpus for p in g["processes"]}
        return str(names[pid])

    def nvmlDeviceGetCpuAffinity(self, h: int, words: int) -> list[int]:
        mask = [0] * words
        for cpu in self.gpus[h]["cpu_affinity"]:
            mask[cpu // 64] |= 1 << (cpu % 64)
        return mask
