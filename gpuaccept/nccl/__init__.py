"""The NCCL area: formulas, sweeps, data patterns, planning, log parsers, and its judging (``verdicts``).

Everything here is importable without torch, pytest or a GPU, so the probe (``gpuaccept.probes.nccl``)
and the tests (``tests/acceptance/test_nccl.py``) share one definition of "bus bandwidth", one sweep
and one bad-node planner, and the selftests can check them against nccl-tests' own definitions.
"""

from __future__ import annotations

__all__: list[str] = []
