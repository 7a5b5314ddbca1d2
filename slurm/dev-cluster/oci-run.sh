#!/usr/bin/env bash
# Dev-cluster glue between Slurm's OCI support (srun --container) and runc or crun: oci.conf's RunTimeRun
# (written by up.sh --oci) calls this with the patterns slurmstepd fills in, and it runs the container.
#
#   oci-run.sh BUNDLE CONTAINER_ID NODE TASK RUNTIME [RUNTIME ARGS...]
#
# Why it exists: Slurm 22.05 writes the container's config.json with the job's environment but not the
# task's (seen on this cluster: no SLURMD_NODENAME, SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID inside, all
# present in the same step without --container), so every rank of a multi-node step would take itself for
# rank 0 of a node named after the host, and no task would know the CPUs it was granted (SLURM_CPUS_ON_NODE,
# which the CPU-binding check compares the task's affinity with). They are put back here from the patterns
# (%n node, %t task), the step's node list and the job's CPU_IDs on the node (scontrol show job -d). 22.05 starts one task
# per node in a container ("unexpected number of tasks 2 > 1"; gpuaccept/probes/_tasks.py starts a node's
# ranks inside it), so the task's global rank is its node's index in the step.
set -euo pipefail
bundle=$1 id=$2 node=$3 task=$4
shift 4
python3 - "$bundle/config.json" "$node" "$task" <<'PY'
import json, re, subprocess, sys

path, node, task = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path) as fh:
    config = json.load(fh)
env = dict(item.split("=", 1) for item in config["process"].get("env", []) if "=" in item)


def hostnames(nodelist: str) -> list[str]:
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True).stdout.split()


def cpus_on(node: str, job: str) -> int | None:
    """The CPUs the job holds on ``node``: scontrol show job -d's "Nodes=node[1-2] CPU_IDs=0-3,6" lines."""
    shown = subprocess.run(["scontrol", "show", "job", "-d", job], capture_output=True, text=True).stdout
    for match in re.finditer(r"Nodes=(\S+) CPU_IDs=(\S+)", shown):
        if node in hostnames(match[1]):
            ranges = [part.split("-") for part in match[2].split(",")]
            return sum(int(r[-1]) - int(r[0]) + 1 for r in ranges)
    return None


nodes = hostnames(env.get("SLURM_STEP_NODELIST", node))
index = nodes.index(node) if node in nodes else 0
env.update(
    SLURMD_NODENAME=node, SLURM_NODEID=str(index), SLURM_LOCALID=str(task), SLURM_PROCID=str(index + task),
    SLURM_TOPOLOGY_ADDR=node,
)
cpus = cpus_on(node, env.get("SLURM_JOB_ID", ""))
if cpus:
    env["SLURM_CPUS_ON_NODE"] = str(cpus)
config["process"]["env"] = [f"{key}={value}" for key, value in env.items()]
with open(path, "w") as fh:
    json.dump(config, fh)
PY
exec "$@" run --bundle "$bundle" "$id"
