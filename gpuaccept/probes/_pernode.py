"""Start a probe as if its srun step held this node alone (the dispatcher's fan-out launch).

``srun --nodes=N ... python -m gpuaccept.probes._pernode <module> [args]`` (the spec's module, whole) runs
one step over N nodes for a test written per node. A probe reads its rank from ``RANK``/``WORLD_SIZE`` before
Slurm's own variables (``_protocol.rank_info``); this sets them to the node-local view (rank = task on this node,
world = tasks per node, rendezvous on this node) and then becomes the probe (``exec``), so each node's
tasks measure exactly what a step on that node alone would have measured, and never meet the other
nodes' tasks in a collective.

``GPUACCEPT_TASKS_PER_NODE`` is set by the dispatcher. The rendezvous port differs per job, step and
node (``_protocol.rendezvous_port``): on a loopback cluster every node is one host, and two nodes' rank 0
must not bind one port.
"""

from __future__ import annotations

import os
import sys

from gpuaccept.probes._protocol import rendezvous_port

TASK_SENTINEL = "GPUACCEPT_TASK "


def _int(name: str, default: int = 0) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else default


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -m gpuaccept.probes._pernode MODULE [ARGS...]")
    module, args = sys.argv[1], sys.argv[2:]
    per_node = _int("GPUACCEPT_TASKS_PER_NODE", 1)
    local = _int("SLURM_LOCALID")
    job, step, node_index = _int("SLURM_JOB_ID"), _int("SLURM_STEP_ID"), _int("SLURM_NODEID")
    os.environ.update(
        RANK=str(local),
        WORLD_SIZE=str(per_node),
        LOCAL_RANK=str(local),
        LOCAL_WORLD_SIZE=str(per_node),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(rendezvous_port(job, step, node_index)),
    )
    # Where this task runs, as slurmd set it: the dispatcher's map of tasks to nodes when srun -v does
    # not print its "launching ... on host" lines (their wording is not an interface).
    print(f"{TASK_SENTINEL}{os.environ.get('SLURMD_NODENAME', '')}", flush=True)
    os.execv(sys.executable, [sys.executable, "-m", module, *args])


if __name__ == "__main__":
    main()
