"""The plugin's verdict rules, end to end in a real pytest session: a pass rests on judged checks.

Each inner test below ends in a way a careless test body could make look like a pass; the plugin must
turn it into the verdict its checks call for, and the run record must list those checks. The same
session runs with ``--sign-key``: its record and summary, signed at its end, verify offline.
"""

from __future__ import annotations

import pytest

from gpuaccept.judging.judge import Judge
from gpuaccept.signing.cli import main as verify_main
from gpuaccept.signing.keys import load_public_key
from gpuaccept.thresholds.loader import load_thresholds

from .conftest import run_inner, write_suite
from .ending import ends
from .signing_keys import write_key

pytestmark = pytest.mark.selftest

INNER = """
import pytest

pytestmark = pytest.mark.acceptance


def test_judged_pass(node, judge):
    judge.check("dev_shm_gib", 64.0, node=node)


def test_only_informational(node, judge):
    judge.info("memory_gib", 2000, node=node)


def test_asserts_but_records_nothing(cluster):
    assert cluster.nodes


def test_forgets_verify_after_a_miss(node, judge):
    judge.check("dev_shm_gib", 0.0625, node=node)


def test_needs_a_limit_the_sku_lacks(node, judge):
    judge.check("matmul_bf16_tflops", 700.0, node=node)
    judge.check("dev_shm_gib", 64.0, node=node)


def test_expectation_fails(node, judge):
    judge.expect("slurm_step_node", "node9", node, node=node)
"""


@pytest.fixture(scope="module")
def inner(tmp_path_factory: pytest.TempPathFactory, dev_cluster):
    """Through the loopback Slurm cluster (salloc, then each node's case): the rules hold whatever the launcher.
    Signed with the operator's key (``--sign-key``; ``test_signing.py`` holds the signatures to account)."""
    suite = write_suite(tmp_path_factory.mktemp("rules"), INNER)
    key = write_key(suite / "operator_ed25519")
    return run_inner(suite, "-m", "acceptance", "--launcher", "slurm", "--sign-key", str(key), env=dev_cluster.env)


def _entry(inner, name: str) -> dict:
    return next(t for t in inner.record["tests"] if t["nodeid"].split("::")[-1].startswith(name))


@pytest.mark.parametrize(
    ("name", "verdict", "category", "message"),
    [
        ("test_judged_pass", "passed", None, ""),
        ("test_only_informational", "error", "could not measure", "only informational figures: memory_gib"),
        ("test_asserts_but_records_nothing", "error", "could not measure", "nothing was measured"),
        ("test_forgets_verify_after_a_miss", "failed", "threshold miss", "dev_shm_gib = 0.0625"),
        (
            "test_needs_a_limit_the_sku_lacks",
            "error",
            "could not measure",
            "cannot judge matmul_bf16_tflops on SKU cpu",
        ),
        ("test_expectation_fails", "failed", "threshold miss", "slurm_step_node = node9"),
    ],
)
def test_verdict_follows_the_checks(inner, name, verdict, category, message):
    entry = _entry(inner, name)
    assert (entry["verdict"], entry["category"]) == (verdict, category), entry
    assert message in entry["message"], entry["message"]


def test_every_check_is_on_the_record_with_its_source(inner):
    checks = _entry(inner, "test_judged_pass")["checks"]
    assert [(c["check"], c["verdict"], c["expected"]) for c in checks] == [("dev_shm_gib", "pass", ">= 1")]
    assert checks[0]["source"] and checks[0]["observed"] == 64.0
    expectation = _entry(inner, "test_expectation_fails")["checks"][0]
    assert (expectation["kind"], expectation["expected"], expectation["verdict"]) == (
        "expectation",
        f"== {expectation['where']}",
        "fail",
    )
    assert "srun(1) --nodelist" in expectation["source"]


def test_the_record_and_summary_signed_at_the_end_verify(inner, capsys):
    """Signed by the session (``--sign-key``) after a run through srun: ``gpuaccept-verify`` holds the record
    and the summary rendered from it against the operator's public key."""
    suite = inner.record_path.parent
    summary = suite / "reports" / "summary.html"
    pubkey = suite / "operator_ed25519.pub"
    fingerprint = load_public_key(pubkey).fingerprint
    assert f'<meta name="gpuaccept-signed-by" content="{fingerprint}">' in summary.read_text()
    for record in (inner.record_path, suite / "latest.json"):
        code = verify_main(["--record", str(record), "--summary", str(summary), "--pubkey", str(pubkey)])
        assert code == 0, capsys.readouterr().err
        assert capsys.readouterr().out.splitlines()[-1] == f"verified, signed by {fingerprint}"


def test_judge_alone_errors_on_a_missing_limit():
    judge = Judge(load_thresholds(), lambda node: "cpu", lambda result: None, "t")
    result = judge.check("membw_tbps", 3.0, node="n1")
    assert result.verdict == "unjudged"
    with ends(judge, "error", match=r"cannot judge membw_tbps on SKU cpu: no limit \(add one in a site file\)"):
        pass


def test_info_and_expect_refuse_the_wrong_kind():
    judge = Judge(load_thresholds(), lambda node: "cpu", lambda result: None, "t")
    with pytest.raises(TypeError, match="not declared informational"):
        judge.info("dev_shm_gib", 1.0, node="n1")
    with pytest.raises(TypeError, match=r"use judge\.expect"):
        judge.check("slurm_step_node", "n1", node="n1")
    with pytest.raises(TypeError, match=r"use judge\.check"):
        judge.expect("dev_shm_gib", 1.0, 1.0, node="n1")
