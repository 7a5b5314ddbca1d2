"""One rank's sentinel line as every role reads it: the dispatcher decodes a probe's output into these
(``gpuaccept.dispatch.result.parse_records``), the area judges read them. It lives here, below both,
so a judge needs nothing of dispatch to read what a probe measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuaccept.contracts.judge import gpu_label

__all__ = ["RankRecord"]


@dataclass(frozen=True)
class RankRecord:
    """One rank's sentinel line: identity and measurements."""

    node: str
    rank: int
    world_size: int
    local_rank: int
    gpu: dict[str, Any] | None
    data: dict[str, Any]
    #: the test hooks set where this rank ran (``gpuaccept.selftest_hooks``): name -> value
    test_hooks: dict[str, str] = field(default_factory=dict)
    #: what the rank ran in (``gpuaccept.probes.container.where``): image marker, OS, runtime, Python
    ran_in: dict[str, Any] | None = None
    #: ``data`` as its probe's payload type, once the probe's spec validated it where the result arrived
    #: (``gpuaccept.probes.specs.ProbeSpec.validate``); None before, or for a probe whose payload is not typed
    payload: Any = field(default=None, compare=False, repr=False)

    @property
    def gpu_label(self) -> str | None:
        """How failures name this GPU: physical index and PCI bus, e.g. ``3 (0000:9A:00.0)``."""
        return gpu_label(self.gpu)
