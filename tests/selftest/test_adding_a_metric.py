"""docs/ARCHITECTURE.md's "Adding a metric" stays true: an NVML metric added the way it says, in a temporary copy of
the repository, is read by the real probe, validated by its spec, judged by its area's judge and listed, with
three files edited by hand; and leaving out any one of the three fails a named selftest of that copy.

The three files: (1) the catalogue entry in ``gpuaccept/data/thresholds.yaml`` (what the metric is, its limit per
SKU with a source, the requirements it proves), (2) the ``GpuHealth`` field in ``contracts/payloads.py``, whose
``Nvml`` marker names the getter the probe fills it from (``probes/gpu_health.declared_readings`` walks the
markers; the fake NVML of the selftests, ``nvml_replay``, answers from them), (3) the judge's line in
``verdicts/gpu_health.py`` and its name in ``HEALTH_METRICS`` (what ``test_gpu_health`` declares it judges).
The current recording (``nvml_recordings.current``, the newest dated one-H200 file) gains the value the new getter
gives: a test edit (``RECORDING_EDIT``), standing in for the recording the GPU machine at hand makes again with the
field in place (``benchmarks/record_gpu_health.sh``). The older recordings, the 2 x H200 one among them, are read
with the field "not recorded" (``nvml_recordings.older_gpu_health``): nothing to edit in them.

The metric is the issue's example, the GPU's highest SM clock (``nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)``),
judged where a limit is set (``limit_optional``): the H100's datasheet figure, and the same figure for the H200 the
recording comes from (the example's limit, held to the recording's value, not a catalogue figure).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.thresholds.requirements_doc import render

from .conftest import REPO
from .nvml_recordings import current

pytestmark = pytest.mark.selftest

ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
METRIC = "gpu_sm_clock_max_mhz"
FIELD = "sm_clock_max_mhz"
#: (1) the catalogue entry and its limits, as the doc says to write them
ENTRY = {
    "unit": "MHz",
    "description": "highest SM clock the GPU reports (NVML max clock)",
    "limit_optional": True,
    "requirements": ["BMAAS08"],
}
LIMIT = {"min": 1980, "source": "NVIDIA H100 Tensor Core GPU datasheet: max boost clock 1980 MHz (SXM5)"}
#: (2) the contract field, after the field it follows in ``GpuHealth``
FIELD_AFTER = (
    '    clock_event_reasons_supported: Annotated[int | None, Nvml("nvmlDeviceGetSupportedClocksEventReasons")]\n'
)
FIELD_LINE = f'    {FIELD}: Annotated[int | None, Nvml("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM")]\n'
#: (3) the judge's line, before the line it precedes in ``judge_gpu``, and its name in ``HEALTH_METRICS``
JUDGE_BEFORE = '    mib = gpu["memory_total_mib"]\n'
JUDGE_LINE = f'    _checked(judge, "{METRIC}", gpu["{FIELD}"], node, label, _why(gpu, "{FIELD}"))\n'
DECLARED_AFTER = '    "gpu_power_limit_w",\n)\n'
#: the test edit: the value the new getter gives on the recorded H200
RECORDING_EDIT = 1980
RECORDING = str(current("gpu_health").relative_to(REPO))
_FIXTURE_ID = RECORDING.removeprefix("fixtures/")

#: the selftests of the copy that hold the metric: the recording is its payload type, the probe reads it back
#: through the markers, every declared metric with a limit is judged on the recording, the recording is healthy
HELD_BY = (
    f"tests/selftest/test_probe_contracts.py::test_recorded_probe_output_is_its_payload_type[{RECORDING.removeprefix('fixtures/')}]",
    "tests/selftest/test_gpu_probes.py::test_the_probe_reads_the_recorded_h200_back_through_its_markers",
    "tests/selftest/test_gpu_health_fixtures.py::test_every_health_metric_with_a_limit_is_judged_on_the_recorded_h200",
    "tests/selftest/test_gpu_health_fixtures.py::test_recorded_h200_is_healthy",
)


def _insert(path: Path, anchor: str, text: str, before: bool = False) -> None:
    source = path.read_text(encoding="utf-8")
    assert source.count(anchor) == 1, f"{path}: the anchor {anchor!r} is not there once (the doc's example drifted)"
    path.write_text(source.replace(anchor, text + anchor if before else anchor + text), encoding="utf-8")


def _catalogue(root: Path) -> None:
    path = root / "gpuaccept" / "data" / "thresholds.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["metrics"][METRIC] = ENTRY
    for sku in ("H100-SXM-80GB", "H200"):
        data["skus"][sku].setdefault("limits", {})[METRIC] = LIMIT
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def _field(root: Path) -> None:
    _insert(root / "gpuaccept" / "contracts" / "payloads.py", FIELD_AFTER, FIELD_LINE)


def _judge_line(root: Path) -> None:
    _insert(root / "gpuaccept" / "verdicts" / "gpu_health.py", JUDGE_BEFORE, JUDGE_LINE, before=True)


def _declared(root: Path) -> None:
    _insert(root / "gpuaccept" / "verdicts" / "gpu_health.py", DECLARED_AFTER, f'    "{METRIC}",\n', before=True)


def _recording(root: Path, value: int) -> None:
    path = root / RECORDING
    data = json.loads(path.read_text())
    for gpu in data["gpus"]:
        gpu[FIELD] = value
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


@functools.cache
def _tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return tuple(p for p in out.splitlines() if (REPO / p).is_file())


def _copy(tmp: Path, *, catalogue: bool = True, field: bool = True, judge: bool = True) -> Path:
    """The repository's tracked files in ``tmp``, with the metric added (less the parts left out)."""
    root = tmp / "repo"
    for rel in _tracked():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, root / rel)
    if catalogue:
        _catalogue(root)
    if field:
        _field(root)
    if judge:
        _judge_line(root)
    _declared(root)  # the name in HEALTH_METRICS goes with the judge module; leaving out the line is the case
    _recording(root, RECORDING_EDIT)
    return root


def _selftests(root: Path, *tests: str) -> dict[str, str]:
    """The copy's own selftests run in the copy: test id -> passed/failed."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *tests],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    outcomes = {test: verdict for verdict, test in re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", run.stdout, re.M)}
    assert outcomes, run.stdout[-3000:] + run.stderr[-3000:]
    return {t: outcomes.get(t, "not run").lower() for t in tests}


def _verdicts(root: Path, value: int) -> dict[str, str]:
    """The metric's verdict on each GPU of the recording (its value set to ``value``), through the copy's probe
    on the replayed NVML, its spec and its judge, against the copy's catalogue."""
    _recording(root, value)
    script = f"""
import json, sys
from gpuaccept.contracts.records import RankRecord
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import gpu_health
from gpuaccept.probes.specs import GPU_HEALTH
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.gpu_health import judge_health
from tests.selftest.nvml_replay import ReplayNVML
gpu_health.nvml = lambda: ReplayNVML(json.load(open({RECORDING!r})))
record = RankRecord("vm", 0, 1, 0, None, json.loads(json.dumps(gpu_health.collect())))
judge = Judge(load_thresholds(), lambda node: "H200", lambda result: None, "selftest")
judge_health(GPU_HEALTH.read(record), judge, "vm", declared_gpus=len(record.data["gpus"]))
print(json.dumps({{r.subject: r.verdict for r in judge.results if r.metric == {METRIC!r}}}))
"""
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(json.loads(run.stdout.splitlines()[-1]))


def test_the_metric_is_read_validated_judged_and_listed(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    assert set(_selftests(root, *HELD_BY).values()) == {"passed"}
    assert set(_verdicts(root, RECORDING_EDIT).values()) == {"pass"}  # 1980 MHz against >= 1980
    assert set(_verdicts(root, 1500).values()) == {"fail"}
    page = render(thresholds=load_thresholds(defaults=root / "gpuaccept" / "data" / "thresholds.yaml"))
    row = next(line for line in page.splitlines() if line.startswith(f"| `{METRIC}`"))
    assert "(judged where a limit is set)" in row and "H100-SXM-80GB, H200: >= 1980" in row and "MHz" in row


@pytest.mark.parametrize(
    ("left_out", "fails"),
    [
        ("field", HELD_BY[0]),  # the recording holds a key its type does not declare
        ("judge", HELD_BY[2]),  # HEALTH_METRICS names a metric the H200 limits and nothing judges
        ("catalogue", HELD_BY[3]),  # the judge checks a metric the catalogue does not know
    ],
)
def test_leaving_one_part_out_fails_a_named_test(left_out: str, fails: str, tmp_path: Path) -> None:
    root = _copy(tmp_path, **{left_out: False})
    assert _selftests(root, fails) == {fails: "failed"}


def test_the_doc_names_the_three_files() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## Adding a metric") :]
    section = section[: section.index("\n## ", 1)]
    assert section.startswith("## Adding a metric: three files"), section.splitlines()[0]
    steps = re.findall(r"^(\d)\. ", section, re.M)
    assert steps == ["1", "2", "3"], steps
    for named in (
        "thresholds.yaml",
        "contracts/",
        "Nvml(",
        "verdicts/",
        "python3 -m gpuaccept.thresholds.requirements_doc",
    ):
        assert named in section, named
