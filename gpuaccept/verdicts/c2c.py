"""NVLink-C2C, the link between a Grace CPU and its GPUs (GH200, GB200, GB300): what NVML says of each GPU's links.

Host bandwidth over C2C is judged where it is measured (``hostbw_h2d_gbps``/``hostbw_d2h_gbps``, whose GB200 and
GB300 floors in thresholds.yaml are NVLink-C2C's: GH200's measured 346 GB/s H2D, NVIDIA/nvbandwidth #23, against
the datasheet's 450 GB/s per direction). The links themselves are shown here, not judged: no public reading gives
a GB200's or GB300's C2C link count or per-link bandwidth to hold a node to (the suite's own first reading on a
Grace node is the figure to calibrate from), so a count judged here would be a made-up floor. Searched again on
2026-12-03: the one public NVML C2C reading found is a GB10's (DGX Spark), in NCCL's topology dump (``<c2c
bw="43125" count="8"/>``, NVIDIA/nccl PR #2202), another chip; and whether every link NVML counts on a GB200
reads ACTIVE (NVML_FI_DEV_C2C_LINK_GET_STATUS 1) is not published either (NVML's per-link NVLink queries do
answer for more slots than a B300 wires, flashinfer-ai/flashinfer PR #3990), so status is not judged.
"""

from __future__ import annotations

from gpuaccept.contracts.fabric_state import C2CGpu
from gpuaccept.contracts.judge import JudgeLike

__all__ = ["judge_c2c", "shown"]


def shown(gpu: C2CGpu) -> str:
    """``4 links, status 1 1 1 1, max 45000 MB/s each`` or why NVML gave none."""
    if gpu["link_count"] is None:
        return "no C2C reading: " + "; ".join(gpu["errors"])
    if not gpu["link_count"]:
        return "0 links"
    status = " ".join("?" if link["status"] is None else str(link["status"]) for link in gpu["links"])
    bandwidths = sorted({link["max_bw_mbps"] for link in gpu["links"]}, key=lambda b: -1 if b is None else b)
    return f"{gpu['link_count']} links, status {status}, max {', '.join(map(str, bandwidths))} MB/s"


def judge_c2c(c2c: list[C2CGpu], judge: JudgeLike, node: str) -> None:
    """Each GPU's C2C links, shown (``c2c_links``, report-only) beside the host-bandwidth checks that judge C2C."""
    for gpu in c2c:
        judge.info("c2c_links", shown(gpu), node=node, gpu=gpu["index"], errors=gpu["errors"])
