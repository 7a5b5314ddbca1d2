"""What a sweep's ranks said about NCCL, gathered once from their typed payloads for the judges and the log.

The node and scale checks carry the NCCL version, the algorithm per size and the transports every rank used, so
a reader of a failed check sees *how* NCCL moved the bytes. Rank 0's log is the one that prints TUNING (the
algorithms); each rank logs its own channels, so the transports are the union over the ranks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuaccept.contracts.nccl_payloads import NcclFacts, NcclRecord

__all__ = ["RunFacts"]


@dataclass(frozen=True)
class RunFacts:
    """One sweep's NCCL facts: rank 0's backend, version and parsed log, every rank's transports summed."""

    backend: str
    nccl_version: str | None
    first: NcclFacts | None  # rank 0's NCCL_DEBUG facts; None: no log was asked for (or gloo)
    transports: Mapping[str, int]

    @classmethod
    def of(cls, payloads: Sequence[NcclRecord]) -> RunFacts:
        """The facts of a sweep's ranks, rank 0 first (the order the step's records arrive in)."""
        head = payloads[0]
        transports: Counter[str] = Counter()
        for payload in payloads:
            told = payload["nccl"]
            transports.update(told["transports"] if told is not None else {})
        return cls(head["backend"], head["nccl_version"], head["nccl"], dict(transports.most_common()))

    @property
    def algorithms(self) -> Mapping[str, Mapping[str, str]]:
        """``{collective: {nccl-tests size: "RING/SIMPLE"}}`` from rank 0's TUNING lines (empty: not logged)."""
        return self.first["algorithms"] if self.first is not None else {}

    @property
    def nics(self) -> list[str]:
        """The NICs of the network NCCL chose (rank 0's log; empty: not logged)."""
        return self.first["nics"] if self.first is not None else []

    def shown(self) -> dict[str, object]:
        """Everything but the algorithms, for the test's log (the algorithms print beside the sweep's rows)."""
        facts = {k: v for k, v in (self.first or {}).items() if k != "algorithms"}
        return {"backend": self.backend, "nccl_version": self.nccl_version, **facts, "transports": self.transports}
