"""NVML's NVLink fabric state of each GPU, as the session-start fingerprint carries it (``probes/_fabric_state``).

NVML's ``nvmlDeviceGetGpuFabricInfoV`` fills a caller's ``nvmlGpuFabricInfo_v3_t`` and, on boards without a
fabric (an H200 under driver 580.159.04, docs/measurements.md), returns success while leaving fields as the
caller wrote them. The probe writes a sentinel into every field first: a field still holding it after the call
is no reading (None here, named in ``left_at_sentinel``), so a zero-filled struct read back can never pass as
"clique 0" or a zero cluster UUID. Clique and cluster UUID are read only once ``state`` is Completed
(NVML_GPU_FABRIC_STATE_COMPLETED); before that NVML says they mean nothing.

The values are NVML's own codes (nvml.h ``NVML_GPU_FABRIC_STATE_*``, ``nvmlReturn_t``,
``NVML_GPU_FABRIC_HEALTH_SUMMARY_*``, the ``NVML_GPU_FABRIC_HEALTH_MASK_*`` bit fields); the judge
(``verdicts/nvlink_fabric.py``) decodes them.
"""

from __future__ import annotations

from typing import Final, Literal

from typing_extensions import TypedDict

from gpuaccept.contracts.strict import strict

__all__ = ["FABRIC_CALL", "C2CGpu", "C2CLink", "FabricGpu", "FabricState"]

FABRIC_CALL: Final = "nvmlDeviceGetGpuFabricInfoV"


@strict
class FabricGpu(TypedDict):
    """One GPU's fabric reading. ``returned``: the call's own result ("NVML_SUCCESS" or the NVMLError's name);
    every field None that NVML did not write, or that means nothing before state Completed."""

    index: int
    uuid: str | None
    returned: str
    state: int | None
    status: int | None
    clique_id: int | None
    cluster_uuid: str | None
    health_mask: int | None
    health_summary: int | None
    left_at_sentinel: list[str]
    errors: list[str]


@strict
class C2CLink(TypedDict):
    """One NVLink-C2C link of a GPU (Grace superchips): NVML_FI_DEV_C2C_LINK_GET_STATUS and _GET_MAX_BW (MB/s)
    for its index, None where NVML answered with an error (named in the GPU's ``errors``)."""

    link: int
    status: int | None
    max_bw_mbps: int | None


@strict
class C2CGpu(TypedDict):
    """A GPU's NVLink-C2C links (NVML_FI_DEV_C2C_LINK_COUNT): ``link_count`` None where NVML does not answer
    (a board without C2C: NVML_ERROR_NOT_SUPPORTED, named in ``errors``)."""

    index: int
    link_count: int | None
    links: list[C2CLink]
    errors: list[str]


@strict
class FabricState(TypedDict):
    """The node's fabric readings: ``source`` says where they came from ("nvml"; "injected" under the test hook,
    probes/_inject.py; "no nvml" on a node without a driver, with no GPUs listed); ``c2c``: each GPU's NVLink-C2C
    links to its Grace CPU (empty when injected: no C2C field values are published)."""

    call: Literal["nvmlDeviceGetGpuFabricInfoV"]
    source: Literal["nvml", "injected", "no nvml"]
    gpus: list[FabricGpu]
    c2c: list[C2CGpu]
