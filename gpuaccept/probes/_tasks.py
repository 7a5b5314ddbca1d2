"""Start this node's ranks inside one container task, as srun starts them on the host.

Slurm's own OCI support (``srun --container``, 22.05) starts one task per node in a container and refuses
more ("_modify_config: unexpected number of tasks 2 > 1", "Task count specification invalid"), while a
GPU node's probes run one rank per GPU. The dispatcher then asks srun for one task per node, holding all
of the node's GPUs, and this module starts the ranks in it, as torchrun does: each child gets the
variables Slurm would have given that task (``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS``, ...)
and its own slice of ``CUDA_VISIBLE_DEVICES``. 22.05 leaves the task's GPU list out of the container too
(seen on 2 x H100 80GB HBM3, 2026-11-26: no ``CUDA_VISIBLE_DEVICES`` inside, every rank saw both GPUs and the
isolation test failed); when the task then holds as many GPUs as the node has device files, it holds
them all, and rank i gets GPUs i*G .. i*G+G-1 of them. One rank failing ends its siblings, as
``--kill-on-bad-exit`` does, and the exit code is the first failure's.

    python -m gpuaccept.probes._tasks TASKS GPUS_PER_TASK MODULE [ARGS...]

MODULE is the module to run, whole: a spec's (``gpuaccept.probes.hygiene``), or ``gpuaccept.probes._pernode``
for a fan-out step.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from types import FrameType

#: seconds siblings get between SIGTERM and SIGKILL once one rank failed or the step is cancelled
GRACE_S = 5.0


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else default


def rank_env(task: int, tasks: int, gpus_per_task: int) -> dict[str, str]:
    """The variables of task ``task`` of this node, as slurmstepd sets them for a multi-task step."""
    node = _int("SLURM_NODEID", 0)
    nodes = _int("SLURM_STEP_NUM_NODES", _int("SLURM_NNODES", 1))
    total = str(nodes * tasks)
    env = {
        "SLURM_PROCID": str(node * tasks + task),
        "SLURM_LOCALID": str(task),
        "SLURM_NTASKS": total,
        "SLURM_NPROCS": total,
        "SLURM_STEP_NUM_TASKS": total,
        "SLURM_NTASKS_PER_NODE": str(tasks),
        "SLURM_STEP_TASKS_PER_NODE": f"{tasks}(x{nodes})" if nodes > 1 else str(tasks),
    }
    gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    if not gpus and "CUDA_VISIBLE_DEVICES" not in os.environ:
        on_node = sorted(int(m[1]) for f in os.listdir("/dev") if (m := re.fullmatch(r"nvidia(\d+)", f)))
        gpus = [str(g) for g in on_node] if len(on_node) == tasks * gpus_per_task else []
    if gpus_per_task and gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[task * gpus_per_task : (task + 1) * gpus_per_task])
    return env


def _stop(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + GRACE_S
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit("usage: python -m gpuaccept.probes._tasks TASKS GPUS_PER_TASK MODULE [ARGS...]")
    tasks, gpus_per_task, module, args = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    command = [sys.executable, "-m", module, *args]
    children = [
        subprocess.Popen(command, env={**os.environ, **rank_env(task, tasks, gpus_per_task)}) for task in range(tasks)
    ]

    def cancelled(signum: int, _frame: FrameType | None) -> None:
        _stop(children)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, cancelled)
    signal.signal(signal.SIGINT, cancelled)
    while True:
        codes = [child.poll() for child in children]
        failed = [code for code in codes if code not in (None, 0)]
        if failed:
            _stop(children)
            sys.exit(failed[0] if failed[0] > 0 else 128 - failed[0])
        if all(code == 0 for code in codes):
            return
        time.sleep(0.05)


if __name__ == "__main__":
    main()
