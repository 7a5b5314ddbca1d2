#!/usr/bin/env bash
# Grace nodes (GB200, GB300, GH200) are aarch64: the project's dependencies, with torch and the [train] extra
# that the node-side probes import, must resolve to wheels for the node OS's aarch64 tags. pip's resolver
# checks it here without installing anything: --platform manylinux_2_28_aarch64 (torch's aarch64 wheel tag)
# and every older manylinux aarch64 tag a glibc 2.28 node also runs (manylinux2014 = 2_17 for tokenizers and
# PyYAML, 2_27 for NVIDIA's cuDNN wheel: pip 23 does not widen a --platform by itself), and
# --only-binary=:all: (a node builds nothing from source), on the Python a node runs (3.12 by default;
# GPUACCEPT_NODE_PYTHON overrides).
# It reads the dependency list from pyproject.toml, so a dependency added there is checked too. Needs the
# network to PyPI (the index's metadata and wheel names only: --dry-run downloads no wheel it does not need
# to read metadata from). Exits non-zero, naming the package, when one has no wheel for the platform.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${GPUACCEPT_NODE_PYTHON:-3.12}"
mapfile -t requirements < <(python3 - <<'PY'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for requirement in project["dependencies"] + project["optional-dependencies"]["train"]:
    print(requirement)
print("torch")  # not pinned in pyproject (clusters bring their own build); the node needs one that resolves
PY
)
platforms=(--platform manylinux2014_aarch64)
for glibc in $(seq 17 28); do platforms+=(--platform "manylinux_2_${glibc}_aarch64"); done
start=$(date +%s)
report=$(mktemp /tmp/gpuaccept-aarch64.XXXX.json)
target=$(mktemp -d /tmp/gpuaccept-aarch64.XXXX)  # pip takes platform options only with --target; it stays empty
trap 'rm -rf "$report" "$target"' EXIT
python3 -m pip install --dry-run --ignore-installed --quiet --no-warn-conflicts --target "$target" \
  --only-binary=:all: "${platforms[@]}" --python-version "$python" --implementation cp \
  --report "$report" "${requirements[@]}"
python3 - "$report" "$python" "$(( $(date +%s) - start ))" <<'PY'
import json, sys
report, python, seconds = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
wheels = {i["metadata"]["name"]: i["download_info"]["url"].rsplit("/", 1)[-1] for i in report["install"]}
print(f"aarch64 resolve: {len(wheels)} wheels for cp{python.replace('.', '')} manylinux_2_28_aarch64 in {seconds} s")
print(f"  torch: {wheels.get('torch', 'MISSING')}")
bad = sorted(n for n, w in wheels.items() if not (w.endswith("-any.whl") or "aarch64" in w))
if bad:
    sys.exit(f"aarch64 resolve: wheels not built for aarch64: {', '.join(bad)}")
PY
