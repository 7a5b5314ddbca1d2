#!/usr/bin/env bash
# Records the nccl and nccl_tests probes' real output on one GPU host, for fixtures/nccl/ (issue 55):
#
#   bash benchmarks/record_nccl.sh OUTDIR [NAME]     # NAME: the hardware, default h200-<n>gpu
#
# writes, each named by the hardware:
#   NAME.nccl.out         every rank's result lines of `python3 -m gpuaccept.probes.nccl` (one rank per GPU of
#                         this host, NCCL backend, the default sweep 1 MiB - 8 GiB, NCCL_DEBUG=INFO facts)
#   NAME.nccl-logs/       each rank's NCCL_DEBUG=INFO file (--nccl-log-dir), the facts' evidence
#   NAME.nccl_tests.out   `python3 -m gpuaccept.probes.nccl_tests` over the same GPUs (needs NCCL_TESTS_DIR)
# Copy NAME.nccl.out to fixtures/nccl/ and add it to RECORDED (tests/selftest/test_probe_contracts.py, spec NCCL,
# the rank count); NAME.nccl_tests.out likewise (spec NCCL_TESTS), and take nccl_tests out of UNRECORDED.
# The pre-contract 2 x H200 recording stays beside it (fixtures/nccl/README.md). Under 3 minutes on one H200.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: $0 OUTDIR [NAME]}
gpus=$(nvidia-smi -L | wc -l)
name=${2:-h200-${gpus}gpu}
mkdir -p "$out"
export PYTHONPATH=$PWD MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29577} WORLD_SIZE=$gpus LOCAL_WORLD_SIZE=$gpus
: > "$out/$name.nccl.out"
pids=()
for ((r = 0; r < gpus; r++)); do
    RANK=$r LOCAL_RANK=$r python3 -m gpuaccept.probes.nccl --backend nccl --nccl-log-dir "$out/$name.nccl-logs" \
        > "$out/$name.nccl.rank$r" 2> "$out/$name.nccl.rank$r.err" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
for ((r = 0; r < gpus; r++)); do cat "$out/$name.nccl.rank$r" >> "$out/$name.nccl.out"; done
if [ -n "${NCCL_TESTS_DIR:-}" ]; then
    python3 -m gpuaccept.probes.nccl_tests --ngpus "$gpus" --dir "$NCCL_TESTS_DIR" > "$out/$name.nccl_tests.out"
fi
python3 - "$out/$name.nccl.out" "$gpus" <<'PY'
import sys
from gpuaccept.dispatch.result import parse_records
from gpuaccept.probes import specs
for record in parse_records("nccl", open(sys.argv[1]).read(), int(sys.argv[2]), ("host",)):
    typed = specs.NCCL.read(specs.NCCL.validate(record))
    print(f"rank {record.rank}: {typed['communicator']['outcome']}, NCCL {typed['nccl_version']}, valid NcclRecord")
PY
