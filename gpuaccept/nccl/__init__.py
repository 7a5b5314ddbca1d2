"""The NCCL area's code that runs with the probe, and what the judges read it with: data patterns
(``patterns``), the hang watchdog (``watchdog``), NCCL log and nccl-tests parsing (``ncclinfo``,
``nccltests``) and the bad-node planner (``plan``: scales, groups, suspects, pairs).

Its judging lives in ``gpuaccept.verdicts.nccl``, its formulas and sweep in ``gpuaccept.contracts``
(one definition of "bus bandwidth" and one sweep for the probe and the judges). Nothing here imports a
judge or pytest, and everything is importable without torch or a GPU, so the selftests check it
against nccl-tests' own definitions.
"""

from __future__ import annotations

__all__: list[str] = []
