"""Judge each GPU's NVLink fabric state (the fingerprint's ``fabric``), so a fabric that is not really up never passes.

Published false passes this rule cannot repeat: a GB200 node read ``State: Completed``, ``Status: Insufficient
Resources``, ``CliqueId: 0`` and a zero ``ClusterUUID``, and was put back in production by a check that only
looked for ``N/A`` (Azure/azhpc-images PR #506); a GPU read Completed and Success and still ``Health Summary:
Unhealthy`` (kubernetes-sigs/dra-driver-nvidia-gpu issue #626). On a node that must be in an NVL72 domain
(``nvlink_domain: nvl72``) each GPU passes only on all of:

* the call answered and wrote every field it was read for (a sentinel left is no reading: probes/_fabric_state.py);
* state Completed (NVML_GPU_FABRIC_STATE_COMPLETED) and status Success (NVML_SUCCESS);
* a cluster UUID that is not all zeros (a zero UUID is how NVML says "in no cluster": on HGX H100 Completed
  with a zero UUID is normal, meta-pytorch/torchcomms PR #1385);
* health summary Healthy where the driver reports health; "Not Supported" (NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED,
  what gpud #1106's GB200 read on its driver) is a declared absence, named with the driver on the check, never a
  failure and never a claim that health was checked; Unhealthy or Limited Capacity fails;
* bandwidth not degraded: the health mask's DEGRADED_BW field (bits 0-1) not TRUE. NVML packs 2-bit fields whose
  value is 0 not supported, 1 true (the condition holds), 2 false (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*;
  aws/eks-node-monitoring-agent PR #181 decodes it the same way): NCCL issue #2186's mask 0xaa is every field
  false, a healthy mask, not "4 of 8 paths down" as its reporter read it.

Every GPU of the node must then be in one clique, a clique being (cluster UUID, clique ID): GB200 and GB300 report
the placeholder clique ID 32766 across unrelated racks (meta-pytorch/torchcomms PR #3612), so the ID alone proves
nothing. "Not supported" on a node that must be in a domain FAILS. On a node whose domain is ``none`` (HGX boards,
where Completed with a real UUID says nothing about a multi-node domain: torchcomms #1315) the reading is shown
(``nvlink_fabric_shown``), never judged as a domain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from gpuaccept.contracts.fabric_state import FabricGpu, FabricState
from gpuaccept.contracts.judge import JudgeLike

__all__ = [
    "DOMAIN_GPUS",
    "READY",
    "DomainKind",
    "degraded_bandwidth",
    "domain_for",
    "domain_not_judged",
    "health_fields",
    "judge_fabric",
    "node_cliques",
    "problems",
]

DomainKind = Literal["nvl72", "none"]
#: the datasheet field of a SKU saying how many GPUs share its NVLink domain (thresholds.yaml skus.<SKU>.datasheet)
DOMAIN_GPUS = "nvlink_domain_gpus"
READY = "in the fabric"
#: NVML_GPU_FABRIC_STATE_COMPLETED
COMPLETED = 3
STATES = {0: "Not Supported", 1: "Not Started", 2: "In Progress", 3: "Completed"}
SUMMARIES = {0: "Not Supported", 1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}
STATUS_NAMES = {0: "Success", 3: "Not Supported", 23: "Insufficient Resources"}
#: the health mask's 2-bit fields (name, shift) and their values (nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*)
MASK_FIELDS = (("degraded_bandwidth", 0), ("route_recovery", 2), ("route_unhealthy", 4), ("access_timeout_recovery", 6))
MASK_VALUES = {0: "not supported", 1: "true", 2: "false", 3: "invalid"}


def domain_for(judge: JudgeLike, node: str, site: DomainKind | None = None) -> DomainKind:
    """The domain ``node`` must be in: the site's ``domain.nvlink_domain`` (``site``, thresholds/domain_site) where
    it says one, else its SKU's: ``nvl72`` where the datasheet puts 72 GPUs in one NVLink domain (GB200, GB300),
    else ``none``."""
    if site is not None:
        return site
    gpus = judge.datasheet(judge.sku(node), DOMAIN_GPUS)
    return "nvl72" if gpus is not None and gpus >= 72 else "none"


def domain_not_judged(domain: DomainKind, sku: str) -> str | None:
    """Why a node's fabric state is shown and not judged (the test skips with it after showing), or None."""
    if domain == "none":
        return f"SKU {sku}'s NVLink domain is none (nvlink_domain_gpus): its fabric state is shown, not judged"
    return None


def health_fields(mask: int) -> dict[str, str]:
    """The mask's 2-bit fields in NVML's words: 0xaa -> every field "false"."""
    return {name: MASK_VALUES[(mask >> shift) & 0x3] for name, shift in MASK_FIELDS}


def degraded_bandwidth(mask: int) -> bool:
    return health_fields(mask)["degraded_bandwidth"] == "true"


def _status(code: int) -> str:
    return STATUS_NAMES.get(code, f"NVML error {code}")


def problems(gpu: FabricGpu) -> list[str]:
    """Why this GPU is not in the fabric, in NVML's words; empty when it is."""
    out: list[str] = []
    if gpu["returned"] != "NVML_SUCCESS":
        return [f"nvmlDeviceGetGpuFabricInfoV returned {gpu['returned']}"]
    state = gpu["state"]
    if state is None:
        return ["state not written by NVML (left at the sentinel)"]
    if state != 3:
        return [f"state {STATES.get(state, state)}"]
    if gpu["status"] is None:
        out.append("status not written by NVML")
    elif gpu["status"] != 0:
        out.append(f"status {_status(gpu['status'])}")
    if gpu["cluster_uuid"] is None:
        out.append("cluster UUID not written by NVML")
    elif set(gpu["cluster_uuid"].replace("-", "")) == {"0"}:
        out.append(f"cluster UUID {gpu['cluster_uuid']} (zero: in no cluster)")
    if gpu["clique_id"] is None:
        out.append("clique ID not written by NVML")
    summary = gpu["health_summary"]
    if summary is None:
        out.append("health summary not written by NVML")
    elif summary in (2, 3):
        out.append(f"health summary {SUMMARIES[summary]}")
    elif summary not in SUMMARIES:
        out.append(f"health summary {summary} (not an NVML value)")
    if gpu["health_mask"] is None:
        out.append("health mask not written by NVML")
    elif degraded_bandwidth(gpu["health_mask"]):
        out.append(f"bandwidth degraded (health mask {gpu['health_mask']:#x})")
    return out


def _shown(gpu: FabricGpu) -> str:
    state = gpu["state"]
    words = [f"state {STATES.get(state, state) if state is not None else 'not written'}"]
    if gpu["clique_id"] is not None:
        words.append(f"clique {gpu['cluster_uuid']}/{gpu['clique_id']}")
    if gpu["left_at_sentinel"]:
        words.append(f"left at sentinel: {', '.join(gpu['left_at_sentinel'])}")
    return "; ".join(words)


def _detail(gpu: FabricGpu, driver: str | None) -> dict[str, object]:
    detail: dict[str, object] = {
        "state": gpu["state"],
        "status": gpu["status"],
        "clique": None if gpu["clique_id"] is None else f"{gpu['cluster_uuid']}/{gpu['clique_id']}",
        "health_mask": None if gpu["health_mask"] is None else f"{gpu['health_mask']:#x}",
        "left_at_sentinel": gpu["left_at_sentinel"],
    }
    if gpu["health_mask"] is not None:
        detail["health"] = health_fields(gpu["health_mask"])
    if gpu["health_summary"] == 0:
        detail["health_summary"] = f"not reported by driver {driver or 'unknown'} (Not Supported): a declared absence"
    elif gpu["health_summary"] is not None:
        detail["health_summary"] = SUMMARIES.get(gpu["health_summary"], gpu["health_summary"])
    return detail


def judge_fabric(
    fabric: FabricState, domain: DomainKind, judge: JudgeLike, node: str, driver: str | None = None
) -> None:
    """Each GPU's fabric state and the node's one clique, on a node whose domain is ``nvl72``; shown otherwise.
    ``driver``: the node's driver version, named where it reports no fabric health."""
    gpus = fabric["gpus"]
    if domain == "none":
        for gpu in gpus:
            judge.info("nvlink_fabric_shown", _shown(gpu), node=node, gpu=gpu["index"], **_detail(gpu, driver))
        return
    if not gpus:
        judge.expect("nvlink_fabric_state", f"no fabric reading ({fabric['source']})", READY, node=node, gpu="all")
        return
    for gpu in gpus:
        found = problems(gpu)
        observed = READY if not found else "; ".join(found)
        judge.expect(
            "nvlink_fabric_state",
            observed,
            READY,
            node=node,
            gpu=gpu["index"],
            uuid=gpu["uuid"],
            **_detail(gpu, driver),
        )
    cliques: Mapping[tuple[str | None, int | None], list[int]] = _cliques(gpus)
    only = next(iter(cliques))
    observed = (
        "one clique"
        if len(cliques) == 1 and _a_clique(*only)
        else "; ".join(f"{u}/{c}: GPUs {', '.join(map(str, g))}" for (u, c), g in cliques.items())
    )
    judge.expect("nvlink_fabric_clique", observed, "one clique", node=node, cliques=len(cliques))


def node_cliques(fabric: FabricState) -> set[tuple[str, int]] | None:
    """The cliques (cluster UUID, clique ID) of the node's GPUs whose fabric state is Completed, what the block
    checks compare across nodes (verdicts/nvlink_block.py); None when no GPU of the node is Completed (clique and
    UUID mean nothing before: unread)."""
    done = [g for g in fabric["gpus"] if g["state"] == COMPLETED]
    found = {(g["cluster_uuid"], g["clique_id"]) for g in done if _a_clique(g["cluster_uuid"], g["clique_id"])}
    return {(u, c) for u, c in found if u is not None and c is not None} if done else None


def _a_clique(uuid: str | None, clique: int | None) -> bool:
    """A (cluster UUID, clique ID) that names a clique: both read, the UUID not all zeros (in no cluster)."""
    return uuid is not None and clique is not None and set(uuid.replace("-", "")) != {"0"}


def _cliques(gpus: list[FabricGpu]) -> dict[tuple[str | None, int | None], list[int]]:
    out: dict[tuple[str | None, int | None], list[int]] = {}
    for gpu in gpus:
        out.setdefault((gpu["cluster_uuid"], gpu["clique_id"]), []).append(gpu["index"])
    return out
