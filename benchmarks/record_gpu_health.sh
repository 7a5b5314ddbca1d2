#!/usr/bin/env bash
# Records the node probes' real output on a GPU host, for fixtures/ (issue 55: recordings are evidence):
#
#   bash benchmarks/record_gpu_health.sh OUTDIR [NAME]     # NAME: the hardware, default h200-<n>gpu
#
# writes, each named by the hardware:
#   NAME.gpu_health.json   `gpu_health --dump` (every GpuHealth key, NVML's errors beside each null)
#   NAME.nvlink.json       `nvlink --dump` (every NvlinkState key, the per-link data counters included)
#   NAME.{gdr,xid,visibility,hygiene,infiniband}.out   each probe's result line as it printed it
# Copy the two JSON files to fixtures/nvml/ as NAME-YYYY-MM-DD.*.json beside the older ones: the newest dated
# file of a kind is the current recording the selftests replay (tests/selftest/nvml_recordings.py), held to its
# type by tests/selftest/test_probe_contracts.py; say in fixtures/nvml/README.md what machine it is.
# The .out files go to fixtures/node/.
# Host-side reads only (NVML, sysfs, the kernel log): under 10 s; no Slurm needed.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: $0 OUTDIR [NAME]}
name=${2:-h200-$(nvidia-smi -L | wc -l)gpu}
mkdir -p "$out"
export PYTHONPATH=$PWD
python3 -m gpuaccept.probes.gpu_health --dump "$out/$name.gpu_health.json" > "$out/$name.gpu_health.out"
python3 -m gpuaccept.probes.nvlink --dump "$out/$name.nvlink.json" > "$out/$name.nvlink.out"
for probe in gdr xid visibility hygiene infiniband; do
    python3 -m "gpuaccept.probes.$probe" > "$out/$name.$probe.out"
done
python3 - "$out" "$name" <<'EOF'
import json, sys
from pathlib import Path
from gpuaccept.contracts.records import RankRecord
from gpuaccept.dispatch.result import parse_records
from gpuaccept.probes import specs
out, name = Path(sys.argv[1]), sys.argv[2]
for probe in ("gpu_health", "nvlink"):
    data = json.loads((out / f"{name}.{probe}.json").read_text())
    specs.SPECS[probe].validate(RankRecord("host", 0, 1, 0, None, data))
for probe in ("gdr", "xid", "visibility", "hygiene", "infiniband"):
    for record in parse_records(probe, (out / f"{name}.{probe}.out").read_text(), 1, ()):
        specs.SPECS[probe].validate(record)
print(f"{name}: every recording is its spec's payload type")
EOF
ls -l "$out"
