"""Across the nodes of one run, every rank trains the same curve, and a perturbed rank is named.

The real acceptance training tests, run by an inner pytest through srun on the 2-node loopback cluster
(gloo ranks on CPU), with the test hook ``GPUACCEPT_TEST_PERTURB_TRAINING`` on rank 1 of node2: one
bf16 ulp in one weight after step 10. The ranks of both nodes form one group (same SKU and stack), the
three healthy ones agree bit for bit, and ``test_finetune_agreement`` FAILS naming node2 rank 1 and
step 11, while that rank's own loss figures still meet every limit. Both nodes' launches have
the same arguments, so one fan-out step can train both.
"""

from __future__ import annotations

from pathlib import Path

from .conftest import repository_view, run_inner

HOOK = "node=node2,rank=1,step=10"


def test_perturbed_rank_is_named_across_nodes(dev_cluster, tmp_path: Path):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    run = run_inner(
        tmp_path,
        str(repository_view(tmp_path / "repo") / "tests" / "acceptance" / "test_training.py"),
        "-m",
        "acceptance",
        "-k",
        "finetune_each_gpu or finetune_agreement",
        "--launcher",
        "slurm",
        "--nodes",
        "2",
        env={**dev_cluster.env, "GPUACCEPT_TEST_PERTURB_TRAINING": HOOK, "OMP_NUM_THREADS": "1"},
        timeout=900,
    )
    verdicts = run.verdicts()
    assert verdicts.get("test_finetune_agreement[default]") == "failed", (verdicts, run.output[-3000:])
    message = run.messages()["test_finetune_agreement[default]"]
    assert "node2 GPU cpu rank 1" in message or "node2 cpu rank 1" in message, message
    assert "first departs at step 11" in message, message
    checks = [m for m in run.record["metrics"] if m["metric"] == "train_trajectory_rel_diff"]
    failed = sorted((m["node"], m["subject"]) for m in checks if m["verdict"] == "fail")
    passed = sorted((m["node"], m["subject"]) for m in checks if m["verdict"] == "pass" and m["value"] == 0.0)
    assert failed == [("node2", "cpu rank 1")], checks
    assert passed == [("node1", "cpu rank 0"), ("node1", "cpu rank 1"), ("node2", "cpu rank 0")], checks
    # both nodes' launches had the same arguments (one fan-out step can serve them), each its own folder
    tests = run.record["tests"].values() if isinstance(run.record["tests"], dict) else run.record["tests"]
    # the fan-out step's command runs the probe's module through probes._pernode, a node's own case runs it directly
    launched = [c.split(" -m ", 1)[1] for t in tests for c in t.get("commands", []) if "probes.finetune" in c]
    launches = {c.removeprefix("gpuaccept.probes._pernode ") for c in launched}
    assert len(launches) == 1 and "2r-{node}" in next(iter(launches)), launches
    (group,) = [m for m in run.record["metrics"] if m["metric"] == "train_trajectory_group"]
    assert group["value"] == 4 and group["extra"]["agreeing"] == 3
    # the perturbed rank's own run still meets the loss limits: only the agreement sees the fault
    losses = [
        m
        for m in run.record["metrics"]
        if m["node"] == "node2"
        and m["subject"] == "cpu rank 1"
        and m["metric"] in ("train_loss_final", "train_eval_loss")
    ]
    assert len(losses) == 2 and {m["verdict"] for m in losses} == {"pass"}, losses
