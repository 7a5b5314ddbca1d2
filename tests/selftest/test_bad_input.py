"""Bad input is refused before anything runs, naming it (issue 30): exit 4, one line naming the option or
the file and what is wrong, no test verdict, no job; the node check keeps its own exit contract.

Each row is what a new user tried: the inner sessions run the real plugin with the local launcher.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.inputs import InputError, check_dataset, check_writable, read_chat_jsonl
from gpuaccept.judging.baseline import Baseline
from gpuaccept.judging.verdict import EXIT_TEST_HOOKS
from gpuaccept.nodecheck.cli import main as node_check
from gpuaccept.report.allure_runs import KEEP, claim_run_folder, point_latest
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord
from gpuaccept.thresholds.loader import ThresholdsError, load_thresholds

from . import signing_keys
from .conftest import REPO, run_inner, write_suite

SUITE = """
from gpuaccept.probes import specs
import pytest
pytestmark = pytest.mark.acceptance

def test_x(node, cluster, judge):
    cluster.run(specs.HYGIENE, nodes=[node])
    judge.check("nofile", 65536, node=node)
"""

CHAT = '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n'


def _binary(d: Path) -> Path:
    path = d / "site.bin"
    path.write_bytes(bytes(range(256)) * 4)
    return path


def _folder(d: Path) -> Path:
    path = d / "site.d"
    path.mkdir()
    return path


def _text(name: str, text: str) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        path = d / name
        path.write_text(text)
        return path

    return make


def _model_folder(d: Path) -> Path:
    path = d / "model"
    path.mkdir()
    return path


QWEN2_CONFIG = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128}


def _checkpoint(config: dict, files: dict[str, bytes]) -> Callable[[Path], Path]:
    """A checkpoint folder holding ``config.json`` and ``files`` (what a user copied, or half copied)."""

    def make(d: Path) -> Path:
        path = d / "ckpt"
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        for name, data in files.items():
            (path / name).write_bytes(data)
        return path

    return make


def _safetensors(tensor_bytes: int, held: int) -> bytes:
    """A safetensors file whose header describes ``tensor_bytes`` of data and which holds ``held`` of them."""
    header = json.dumps({"w": {"dtype": "BF16", "shape": [tensor_bytes // 2], "data_offsets": [0, tensor_bytes]}})
    return len(header).to_bytes(8, "little") + header.encode() + bytes(held)


TOKENIZER = {"tokenizer.json": b"{}"}


def _future_record(d: Path) -> Path:
    path = d / "future.json"
    record = RunRecord().to_dict() | {"schema": "gpuaccept.run/99"}
    path.write_text(json.dumps(record))
    return path


def _bundle(mounts: list[str]) -> Callable[[Path], Path]:
    """An OCI bundle folder (config.json, rootfs/) whose config binds ``mounts`` (host paths)."""

    def make(d: Path) -> Path:
        path = d / "bundle"
        (path / "rootfs").mkdir(parents=True)
        binds = [{"destination": m, "type": "bind", "source": m, "options": ["rbind"]} for m in mounts]
        (path / "config.json").write_text(json.dumps({"process": {"args": ["sh"]}, "mounts": binds}))
        return path

    return make


#: option, how to make its value in the suite's folder, what the one line must say
ROWS: dict[str, tuple[str, Callable[[Path], Path] | str, str]] = {
    "thresholds is binary": ("--thresholds", _binary, "not a text file"),
    "thresholds is a folder": ("--thresholds", _folder, "is a folder, not a thresholds YAML file"),
    "thresholds is empty": ("--thresholds", _text("empty.yaml", ""), "empty.yaml: empty"),
    "thresholds holds only comments": ("--thresholds", _text("c.yaml", "# todo\n"), "c.yaml: empty"),
    "site SKU matches every GPU": (
        "--thresholds",
        _text("broad.yaml", 'skus:\n  ours:\n    match: [".*"]\n    inherits: gpu-node\n'),
        "skus.ours.match.0: '.*' also matches",
    ),
    "model folder missing": ("--model-path", "no-such-model", "--model-path (command line): no-such-model does not"),
    "model folder without config.json": ("--model-path", _model_folder, "has no config.json"),
    "model folder without weights": ("--model-path", _checkpoint(QWEN2_CONFIG, TOKENIZER), "has no weights"),
    "model shard truncated": (
        "--model-path",
        _checkpoint(QWEN2_CONFIG, {"model.safetensors": _safetensors(4096, 1000), **TOKENIZER}),
        "model.safetensors is truncated",
    ),
    "model index names a missing shard": (
        "--model-path",
        _checkpoint(
            QWEN2_CONFIG,
            {"model.safetensors.index.json": b'{"weight_map": {"w": "model-00002-of-00002.safetensors"}}', **TOKENIZER},
        ),
        "names 1 missing shard(s): model-00002-of-00002.safetensors",
    ),
    "model without a tokenizer": (
        "--model-path",
        _checkpoint(QWEN2_CONFIG, {"model.safetensors": _safetensors(4096, 4096)}),
        "has no tokenizer",
    ),
    "model of an unknown architecture": (
        "--model-path",
        _checkpoint({"model_type": "no-such-arch"}, {"model.safetensors": _safetensors(64, 64), **TOKENIZER}),
        "model_type 'no-such-arch' is not an architecture the installed transformers knows",
    ),
    "run record under /proc": ("--run-record", "/proc/nope/r.json", "--run-record (command line): cannot write in"),
    "dataset empty": ("--dataset", _text("train.jsonl", ""), "holds 0 conversation(s)"),
    "dataset line 3 malformed": ("--dataset", _text("d.jsonl", CHAT + "\n" + "{oops\n" + CHAT), "d.jsonl:3: not JSON"),
    "dataset missing": ("--dataset", "nothing.jsonl", "nothing.jsonl does not exist"),
    "container bundle missing": ("--container-bundle", "no-bundle", "--container-bundle no-bundle: no such folder"),
    "container bundle without config.json": ("--container-bundle", _folder, "cannot read config.json"),
    "container bundle mount source missing": (
        "--container-bundle",
        _bundle(["/tmp", "/no/such/checkout"]),
        "mount source /no/such/checkout does not exist",
    ),
    "container bundle on the local launcher": ("--container-bundle", _bundle([]), "--launcher local has no srun"),
    "container image file missing": ("--container-image", "./gone.sqsh", "--container-image ./gone.sqsh: no such file"),
    "container mounts without an image": ("--container-mounts", "/tmp:/tmp", "--container-mounts is pyxis's"),
    "sign key missing": ("--sign-key", "no-key", "--sign-key (command line): no-key: no such file"),
    "sign key is the public one": ("--sign-key", signing_keys.public_key, "is a public key; signing needs the private"),
}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_bad_input_exits_4_naming_it(tmp_path, row):
    option, make, expected = ROWS[row]
    suite = write_suite(tmp_path / "suite", SUITE)
    value = make(suite) if callable(make) else make
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", option, str(value))
    assert run.returncode == 4, run.output[-2000:]
    errors = [line for line in run.output.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and expected in errors[0], run.output[-2000:]
    assert "Traceback" not in run.output and "INTERNALERROR" not in run.output, run.output[-2000:]
    assert "passed" not in run.output and "failed" not in run.output, "a usage error became a test verdict"
    assert run.duration_s < 20, f"{run.duration_s:.1f} s to refuse bad input"


def test_nccl_sizes_in_the_wrong_order_are_refused(tmp_path):
    """Was: test_nccl_node FAILED with five checks at 0 GB/s."""
    suite = write_suite(tmp_path, SUITE)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--nccl-min-bytes", "10", "--nccl-max-bytes", "5")
    assert run.returncode == 4, run.output[-2000:]
    assert "--nccl-min-bytes (command line)" in run.output and "--nccl-max-bytes (command line)" in run.output
    assert "sweep would be empty" in run.output and "passed" not in run.output


def test_a_record_of_an_unknown_schema_is_no_baseline(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--baseline", str(_future_record(suite)))
    assert run.returncode == 4 and "gpuaccept.run/99" in run.output, run.output[-2000:]


def test_a_record_folder_that_cannot_be_written_is_refused_at_start(tmp_path):
    """Was: INTERNALERROR at the end and no record. ``reports`` a file: unwritable even for root."""
    suite = write_suite(tmp_path, SUITE)
    (suite / "reports").write_text("not a folder")
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--run-record", str(suite / "reports/r.json"))
    assert run.returncode == 4, run.output[-2000:]
    assert "--run-record (command line): cannot write in" in run.output and "INTERNALERROR" not in run.output


BLOCKS_ITS_RECORD = """
import pathlib, pytest
pytestmark = pytest.mark.acceptance

def test_x(node, cluster, judge):
    judge.check("nofile", 65536, node=node)
    pathlib.Path("record.json").mkdir()  # the disk the record goes to turns unusable during the run
"""


def test_a_record_that_cannot_be_written_at_the_end_is_said_and_never_exit_0(tmp_path):
    """Was: INTERNALERROR (a traceback) and no word of the record."""
    suite = write_suite(tmp_path, BLOCKS_ITS_RECORD)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local")
    assert run.returncode != 0 and "INTERNALERROR" not in run.output, run.output[-2000:]
    assert "gpuaccept: could not write the run record" in run.output and "record.json" in run.output


def test_reports_stay_in_the_start_folder_whatever_the_arguments(tmp_path):
    """Was: ``--thresholds /abs/site.yaml`` moved pytest's rootdir, and the reports beside the file."""
    suite = write_suite(tmp_path / "suite", SUITE)
    (suite / "pytest.ini").unlink()  # no ini file: the start folder holds the reports
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    site = elsewhere / "site.yaml"
    site.write_text("defaults:\n  nofile: {min: 1024, source: 'our site policy'}\n")
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--thresholds", str(site))
    assert run.returncode == EXIT_TEST_HOOKS and set(run.verdicts().values()) == {"passed"}, run.output[-2000:]
    assert (suite / "reports" / "allure-results").is_dir(), run.output[-2000:]
    assert not (elsewhere / "reports").exists() and not (tmp_path / "reports").exists()


@pytest.mark.parametrize("option", ["--co", "--dry-run"])
def test_a_rehearsal_never_writes_latest(tmp_path, option):
    """Was: ``--dry-run`` and ``--co`` wrote a ``passed`` latest.json over the real previous run."""
    suite = write_suite(tmp_path, SUITE)
    previous = '{"schema": "gpuaccept.run/3", "status": "failed"}'
    (suite / "latest.json").write_text(previous)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", option)
    assert run.returncode == 0, run.output[-2000:]
    assert (suite / "latest.json").read_text() == previous
    assert not (suite / "latest.metrics.csv").exists()


def test_runs_started_in_the_same_second_keep_two_records(tmp_path):
    started = dt.datetime(2026, 11, 25, 13, 0, 0, tzinfo=dt.timezone.utc)
    paths = []
    for status in ("passed", "failed"):
        record = RunRecord(started=started, status=status)
        paths.append(record.write(record.default_path(tmp_path), unique=True))
    assert [p.name for p in paths] == ["20261125T130000Z.json", "20261125T130000Z-2.json"]
    assert [json.loads(p.read_text())["status"] for p in paths] == ["passed", "failed"]
    assert RunRecord(started=started).default_path(tmp_path, "4711").name == "20261125T130000Z-job4711.json"


def test_two_runs_at_once_keep_two_records_and_two_allure_folders(tmp_path):
    """Was: one ``reports/runs/<UTC-second>.json`` for both, and one Allure folder emptied by the second."""
    suite = write_suite(tmp_path, SUITE)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "gpuaccept.fixtures", "-m", "acceptance", "--launcher", "local"]
    env = {**os.environ, "GPUACCEPT_SELFTEST": "1", "PYTHONPATH": str(REPO)}
    runs = [subprocess.Popen(argv, cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in "ab"]
    outputs = [run.communicate(timeout=300)[0].decode() for run in runs]
    assert [run.returncode for run in runs] == [EXIT_TEST_HOOKS] * 2, outputs  # passed, a selftest's hook set
    records = sorted(p.name for p in (suite / "reports" / "runs").glob("2*.json"))
    assert len(records) == 2, (records, outputs)
    folders = sorted((suite / "reports" / "allure").iterdir())
    assert len(folders) == 2 and all(any(f.glob("*-result.json")) for f in folders), folders
    latest = (suite / "reports" / "allure-results").resolve()
    assert latest in [f.resolve() for f in folders]


def test_the_write_check_leaves_a_folder_another_run_writes_in_meanwhile(tmp_path, monkeypatch):
    """The race behind the test above's rare exit 3: this run made ``reports/`` for its write check, the other run
    claimed its Allure folder in it before this one removed it again."""
    reports = tmp_path / "reports"
    real = tempfile.mkstemp

    def other_run_claims_a_folder(**kwargs: Any) -> tuple[int, str]:
        claim_run_folder(reports)
        return real(**kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", other_run_claims_a_folder)
    check_writable(reports / "runs", "the run record's folder")
    assert [p.name for p in reports.iterdir()] == ["allure"]


def test_a_latest_baseline_is_named_by_its_own_record_whatever_its_suffix(tmp_path):
    """``--baseline latest`` shows the record's own name (``<UTC>-job<id>.json``), which the next run keeps."""
    started = dt.datetime(2026, 11, 25, 13, 0, 0, tzinfo=dt.timezone.utc)
    record = RunRecord(started=started, status="passed")
    record.metrics.append(MetricResult("t", "nofile", 65536, "files", "node1", "cpu", verdict="pass"))
    record.write(record.default_path(tmp_path, "4711"), unique=True)
    assert Baseline.load(tmp_path / "runs" / "latest.json").name == "20261125T130000Z-job4711.json"


def test_allure_folders_are_claimed_per_run_and_the_oldest_go_at_the_end(tmp_path):
    second = dt.datetime(2026, 11, 25, 13, 0, 0, tzinfo=dt.timezone.utc)
    first, again = claim_run_folder(tmp_path, second), claim_run_folder(tmp_path, second)
    assert (first.name, again.name) == ("20261125T130000Z", "20261125T130000Z-2")
    (tmp_path / "allure-results").mkdir()  # the shared folder of the layout before
    older = [claim_run_folder(tmp_path, second - dt.timedelta(minutes=m)) for m in range(1, KEEP + 1)]
    link = point_latest(tmp_path, again)
    assert link.is_symlink() and link.resolve() == again.resolve()
    kept = sorted((tmp_path / "allure").iterdir())
    assert len(kept) == KEEP and first in kept and again in kept and older[-1] not in kept


# ---- the checks themselves, without a session -----------------------------------------------------


def test_a_malformed_jsonl_line_is_named_by_its_line_in_the_file(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(CHAT + CHAT + "\n" + '{"messages": [{"role": "user", "content": "q"}]}\n')
    with pytest.raises(InputError, match=r"d\.jsonl:4: 'messages' must end with an assistant turn"):
        read_chat_jsonl(data)
    data.write_text(CHAT + "[1, 2]\n")
    with pytest.raises(InputError, match=r"d\.jsonl:2: each line needs 'messages'"):
        read_chat_jsonl(data)


def test_a_dataset_folder_needs_both_splits(tmp_path):
    (tmp_path / "train.jsonl").write_text(CHAT)
    with pytest.raises(InputError, match=r"has no test\.jsonl"):
        check_dataset(tmp_path, "--dataset")
    (tmp_path / "test.jsonl").write_text("\n")
    with pytest.raises(InputError, match=r"test\.jsonl is empty"):
        check_dataset(tmp_path, "--dataset")
    (tmp_path / "test.jsonl").write_text(CHAT)
    check_dataset(tmp_path, "--dataset")


def test_the_training_loader_names_the_line_too(tmp_path):
    pytest.importorskip("torch")
    from gpuaccept.training.data import load_splits

    data = tmp_path / "d.jsonl"
    data.write_text(CHAT + "\n\n" + "{oops\n")
    with pytest.raises(ValueError, match=r"d\.jsonl:4: not JSON"):
        load_splits(data)


def test_a_broad_site_sku_is_refused_unless_forced(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text('skus:\n  ours:\n    match: ["NVIDIA H.*"]\n    inherits: gpu-node\n')
    with pytest.raises(ThresholdsError, match=r"skus\.ours\.match\.0: 'NVIDIA H\.\*' also matches .* --sku ours"):
        load_thresholds(site)
    assert load_thresholds(site, sku="ours").sku_for_gpu("NVIDIA H200") == "ours"
    # a broad pattern no packaged SKU's board fits is the site's own business
    site.write_text('skus:\n  ours:\n    match: ["NVIDIA RTX .*"]\n    inherits: gpu-node\n')
    assert load_thresholds(site).sku_for_gpu("NVIDIA RTX 6000 Ada Generation") == "ours"


# ---- the node check: its own contract for every error of its own ---------------------------------


@pytest.mark.parametrize("make", [_binary, _folder, _text("e.yaml", "")], ids=["binary", "folder", "empty"])
@pytest.mark.parametrize(("context", "code"), [("prolog", 0), ("epilog", 0), ("healthcheck", 2)])
def test_the_node_check_with_a_bad_thresholds_file_never_drains(tmp_path, capsys, make, context, code):
    """Was: exit 1 and a traceback, which as a prolog drains the node."""
    args = ["--node", "n1", "--gpus", "0", "--state-dir", str(tmp_path / "s"), "--proc-root", str(tmp_path)]
    args += ["--context", context, "--thresholds", str(make(tmp_path)), "--timeout", "20"]
    assert node_check(args) == code
    out = capsys.readouterr().out
    assert "cannot judge" in out and str(tmp_path) in out, out


@pytest.mark.parametrize(("context", "code"), [("prolog", 0), ("healthcheck", 2)])
def test_the_node_checks_own_bad_argument_never_drains(capsys, context, code):
    """argparse's exit 2 from a prolog drains the node: a typo in slurm.conf's Prolog line must not."""
    started = time.monotonic()
    with pytest.raises(SystemExit) as ended:
        node_check(["--context", context, "--timeout", "soon"])
    assert ended.value.code == code and time.monotonic() - started < 5
    assert "cannot check: argument --timeout" in capsys.readouterr().err


def test_the_architecture_table_is_read_without_importing_transformers():
    """``--model-path``'s architecture check reads transformers' table from its source (no torch import, so bad
    input is refused in about a second), and reads the table transformers itself has."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from gpuaccept.inputs import _known_model_types

    assert _known_model_types() == frozenset(CONFIG_MAPPING_NAMES)
