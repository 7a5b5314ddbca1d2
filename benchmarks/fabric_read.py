"""Read every GPU's NVLink fabric info by the sentinel method and print it as JSON, raw and decoded.

For docs/measurements.md (issue 56): what NVML really writes into ``nvmlGpuFabricInfo_v3_t`` on the GPU at hand.
Every field of the struct is primed with a sentinel (gpuaccept/probes/_fabric_state.py SENTINELS), the struct is
passed by ``ctypes.byref`` with ``version = nvmlGpuFabricInfo_v3`` (passed by value it killed Python on an H200),
and the raw fields after the call are printed with the ones NVML left at their sentinel. Beside it: the older
``nvmlDeviceGetGpuFabricInfo`` (v1 struct, by reference, sentinels too) and the NVLink-C2C field values
(NVML_FI_DEV_C2C_LINK_COUNT, _GET_STATUS, _GET_MAX_BW: what a Grace node's C2C check would read)::

    python3 benchmarks/fabric_read.py OUT_DIR     # writes OUT_DIR/fabric_read.json, prints it too

Needs a GPU node with nvidia-ml-py; reads only (no CUDA context, no GPU work).
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path
from typing import Any

import pynvml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, as the device scripts do

from gpuaccept.probes._fabric_state import SENTINELS, decode, primed

C2C_FIELDS = {
    "c2c_link_count": pynvml.NVML_FI_DEV_C2C_LINK_COUNT,
    "c2c_link_status": pynvml.NVML_FI_DEV_C2C_LINK_GET_STATUS,
    "c2c_link_max_bw_mbps": pynvml.NVML_FI_DEV_C2C_LINK_GET_MAX_BW,
}


def _raw(info: Any) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(info, name) for name, _ in info._fields_ if name != "clusterUuid"}
    out["clusterUuid"] = bytes(info.clusterUuid).hex()
    return out


def _v3(handle: Any, index: int, uuid: str) -> dict[str, Any]:
    info = primed()
    try:
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        returned = "NVML_SUCCESS"
    except pynvml.NVMLError as exc:
        returned = f"{type(exc).__name__}: {exc}"
    left = [n for n, v in SENTINELS.items() if n != "clusterUuid" and getattr(info, n) == v]
    left += ["clusterUuid"] if bytes(info.clusterUuid) == SENTINELS["clusterUuid"] else []
    return {
        "returned": returned,
        "raw": _raw(info),
        "left_at_sentinel": left,
        "decoded": decode(info, index, uuid, returned.split(":")[0]),
    }


def _v1(handle: Any) -> dict[str, Any]:
    info = pynvml.c_nvmlGpuFabricInfo_t()
    info.state, info.status, info.cliqueId = 77, 0xDEADBEEF, 0xDEADBEEF
    ctypes.memmove(info.clusterUuid, SENTINELS["clusterUuid"], len(SENTINELS["clusterUuid"]))
    try:
        fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuFabricInfo")
        ret = fn(handle, ctypes.byref(info))
        returned = "NVML_SUCCESS" if ret == 0 else f"nvmlReturn {ret}"
    except pynvml.NVMLError as exc:
        returned = f"{type(exc).__name__}: {exc}"
    return {
        "returned": returned,
        "raw": _raw(info),
        "sentinels_written": {
            "state": 77,
            "status": 0xDEADBEEF,
            "cliqueId": 0xDEADBEEF,
            "clusterUuid": SENTINELS["clusterUuid"].hex(),
        },
    }


def _c2c(handle: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in C2C_FIELDS.items():
        try:
            value = pynvml.nvmlDeviceGetFieldValues(handle, [field])[0]
            out[name] = {"nvmlReturn": value.nvmlReturn, "value": value.value.uiVal if value.nvmlReturn == 0 else None}
        except pynvml.NVMLError as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    pynvml.nvmlInit()
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name, uuid = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle)
        gpus.append(
            {
                "index": index,
                "name": name,
                "uuid": uuid,
                "v3_by_reference": _v3(handle, index, uuid),
                "v1_by_reference": _v1(handle),
                "c2c": _c2c(handle),
            }
        )
    result = {
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml_py": getattr(pynvml, "__version__", None),
        "sentinels": {k: (v.hex() if isinstance(v, bytes) else v) for k, v in SENTINELS.items()},
        "gpus": gpus,
    }
    text = json.dumps(result, indent=2, default=str)
    (out_dir / "fabric_read.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
