"""Read each GPU's NVLink fabric state from NVML so that what NVML did not fill in is never a reading.

``nvmlDeviceGetGpuFabricInfoV`` takes a pointer to the caller's ``nvmlGpuFabricInfo_v3_t``: nvidia-ml-py
passes its second argument to NVML as given, so the struct goes by ``ctypes.byref`` (a struct handed over by
value killed Python with SIGSEGV on an H200, twice), with ``version`` set to the v3 struct's. NVML then
returned success on that H200 and left a caller-written cliqueId as it was: every field gets a sentinel
first, and a field still holding it afterwards is reported as not read (contracts/fabric_state.py).
Under the test hook (probes/_inject.py) the recorded published fields are written into the same struct by
the injected call, so this decode runs on them unchanged.
"""

from __future__ import annotations

import ctypes
from typing import Any

from gpuaccept.contracts.fabric_state import FABRIC_CALL, C2CGpu, C2CLink, FabricGpu, FabricState
from gpuaccept.probes import _inject

__all__ = ["SENTINELS", "VERSION_V3", "FabricInfoV3", "decode", "primed", "read_c2c", "read_fabric", "read_gpu"]

UUID_LEN = 16  # NVML_GPU_FABRIC_UUID_LEN
STATE_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED


class FabricInfoV3(ctypes.Structure):
    """nvml.h ``nvmlGpuFabricInfo_v3_t``, field for field. ``state`` is nvml.h's ``nvmlGpuFabricState_t``, an
    ``unsigned char``, followed by three bytes of padding: nvidia-ml-py declares it ``c_uint``, and on an H200
    (driver 580.159.04, 2026-12-02) NVML wrote only its first byte, so a four-byte sentinel came back 0xDEADBE00
    (docs/measurements/2026-12-02.md). Read as one byte, as here, the state is what NVML wrote; the layout and size
    are the same (healthMask stays at offset 32).
    """

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
        ("healthSummary", ctypes.c_ubyte),
    ]


#: nvml.h NVML_STRUCT_VERSION(GpuFabricInfo, 3): the struct's size with the version in the top byte
VERSION_V3 = ctypes.sizeof(FabricInfoV3) | (3 << 24)
#: written into every field before the call; none is a value NVML defines for its field
SENTINELS: dict[str, Any] = {
    "status": 0xDEADBEEF,
    "cliqueId": 0xDEADBEEF,
    "state": 0xA5,  # one byte (nvmlGpuFabricState_t); NVML's states are 0-3
    "healthMask": 0xDEADBEEF,
    "healthSummary": 0xA5,
    "clusterUuid": bytes([0xA5] * UUID_LEN),
}


def primed() -> FabricInfoV3:
    info = FabricInfoV3()
    info.version = VERSION_V3
    for name, value in SENTINELS.items():
        if name == "clusterUuid":
            ctypes.memmove(info.clusterUuid, value, UUID_LEN)
        else:
            setattr(info, name, value)
    return info


def _uuid(raw: bytes) -> str:
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def decode(info: FabricInfoV3, index: int, uuid: str | None, returned: str) -> FabricGpu:
    """The struct NVML (or the injected call) filled, field by field: a sentinel left is None and named."""
    left = [name for name, value in SENTINELS.items() if name != "clusterUuid" and getattr(info, name) == value]
    raw_uuid = bytes(info.clusterUuid)
    if raw_uuid == SENTINELS["clusterUuid"]:
        left.append("clusterUuid")

    def field(name: str) -> int | None:
        return None if name in left else int(getattr(info, name))

    state = field("state")
    errors = [f"{name} left at its sentinel: NVML did not write it" for name in left]
    completed = state == STATE_COMPLETED
    if not completed:
        errors.append(f"state {state}: clique and cluster UUID are not read before state Completed ({STATE_COMPLETED})")
    return {
        "index": index,
        "uuid": uuid,
        "returned": returned,
        "state": state,
        "status": field("status"),
        "clique_id": field("cliqueId") if completed else None,
        "cluster_uuid": _uuid(raw_uuid) if completed and "clusterUuid" not in left else None,
        "health_mask": field("healthMask"),
        "health_summary": field("healthSummary"),
        "left_at_sentinel": left,
        "errors": errors,
    }


def read_gpu(call: Any, handle: Any, index: int, uuid: str | None) -> FabricGpu:
    """One GPU: prime the struct, make the call (NVML's, or the injected one) by reference, decode."""
    info = primed()
    try:
        call(handle, ctypes.byref(info))
        returned = "NVML_SUCCESS"
    except Exception as exc:  # NVMLError_NotSupported, _FunctionNotFound (an old driver), ...
        returned = type(exc).__name__
    gpu = decode(info, index, uuid, returned)
    if returned != "NVML_SUCCESS":
        gpu["errors"].insert(0, f"{FABRIC_CALL} returned {returned}")
    return gpu


def read_c2c(lib: Any, handle: Any, index: int) -> C2CGpu:
    """A GPU's NVLink-C2C links from NVML's field values (nvidia-ml-py's NVML_FI_DEV_C2C_LINK_COUNT, then
    _GET_STATUS and _GET_MAX_BW scoped to each link); a field NVML answers with an error is None, named."""
    errors: list[str] = []
    try:
        count_value = lib.nvmlDeviceGetFieldValues(handle, [lib.NVML_FI_DEV_C2C_LINK_COUNT])[0]
    except Exception as exc:
        return {"index": index, "link_count": None, "links": [], "errors": [f"C2C link count: {type(exc).__name__}"]}
    if count_value.nvmlReturn != 0:
        errors.append(f"C2C link count: nvmlReturn {count_value.nvmlReturn}")
        return {"index": index, "link_count": None, "links": [], "errors": errors}
    count = int(count_value.value.uiVal)
    links: list[C2CLink] = []
    if count:
        asked = [(lib.NVML_FI_DEV_C2C_LINK_GET_STATUS, n) for n in range(count)]
        asked += [(lib.NVML_FI_DEV_C2C_LINK_GET_MAX_BW, n) for n in range(count)]
        try:
            values = lib.nvmlDeviceGetFieldValues(handle, asked)
        except Exception as exc:
            errors.append(f"C2C link status and bandwidth: {type(exc).__name__}")
            return {"index": index, "link_count": count, "links": [], "errors": errors}
        for n in range(count):
            got: list[int | None] = []
            for what, value in (("status", values[n]), ("max bandwidth", values[count + n])):
                if value.nvmlReturn != 0:
                    errors.append(f"C2C link {n} {what}: nvmlReturn {value.nvmlReturn}")
                got.append(int(value.value.uiVal) if value.nvmlReturn == 0 else None)
            links.append({"link": n, "status": got[0], "max_bw_mbps": got[1]})
    return {"index": index, "link_count": count, "links": links, "errors": errors}


def read_fabric(lib: Any | None, gpus: list[tuple[Any, int, str | None]]) -> FabricState:
    """Every GPU's reading: ``gpus`` is (NVML handle, index, UUID) per GPU; ``lib`` the initialised pynvml."""
    injected = _inject.fabric_call()
    if injected is not None:
        served = _inject.fabric_gpus()
        readings = [read_gpu(injected, i, i, u) for i, u in served]
        return {"call": FABRIC_CALL, "source": "injected", "gpus": readings, "c2c": []}
    if lib is None:
        return {"call": FABRIC_CALL, "source": "no nvml", "gpus": [], "c2c": []}
    call = getattr(lib, FABRIC_CALL, None)
    if call is None:  # nvidia-ml-py before the v3 call: every GPU says so, none reads as a fabric state

        def call(handle: Any, ref: Any) -> None:
            raise type("NoFabricCallInNvidiaMlPy", (RuntimeError,), {})()

    return {
        "call": FABRIC_CALL,
        "source": "nvml",
        "gpus": [read_gpu(call, h, i, u) for h, i, u in gpus],
        "c2c": [read_c2c(lib, h, i) for h, i, _ in gpus],
    }
