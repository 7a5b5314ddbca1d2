"""thresholds.yaml validation: every malformed variant is a usage error naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaccept.thresholds.loader import ThresholdsError, default_path, load_thresholds

from .conftest import run_inner, write_suite

BAD_SITE_FILES = {
    "unknown metric": (
        "skus:\n  H200:\n    limits:\n      matmul_tflopz: {min: 1, source: x-site}\n",
        "skus.H200.limits.matmul_tflopz: unknown metric",
    ),
    "unknown sku": ("skus:\n  H900:\n    limits:\n      nofile: {min: 1, source: x-site}\n", "skus.H900: unknown SKU"),
    "wrong type": ("defaults:\n  nofile: {min: lots, source: x-site}\n", "defaults.nofile.min"),
    "min above max": ("defaults:\n  nofile: {min: 10, max: 5, source: x-site}\n", "min 10.0 is greater than max 5.0"),
    "no source": ("defaults:\n  nofile: {min: 10}\n", "defaults.nofile.source"),
    "unknown key": ("defaults:\n  nofile: {mni: 10, source: x-site}\n", "defaults.nofile.mni"),
    "not yaml": ("defaults: [unclosed\n", "not valid YAML"),
    "duplicate key": (
        "defaults:\n  nofile: {min: 10, source: x-site}\n  nofile: {min: 1, source: x-site}\n",
        "duplicate key 'nofile'",
    ),
    "top level list": ("- 1\n- 2\n", "top level must be a mapping"),
    "unknown setting": ("settings:\n  stragler_pct: {value: 3, source: x-site}\n", "settings.stragler_pct"),
    "site defines metrics": ("metrics:\n  foo: {unit: x, description: y}\n", "cannot define metrics"),
}


def test_packaged_defaults_are_valid():
    thresholds = load_thresholds()
    assert "cpu" in thresholds.skus and thresholds.digest
    assert thresholds.sku_for_gpu("NVIDIA H200") == "H200"
    assert thresholds.sku_for_gpu("NVIDIA H100 80GB HBM3") == "H100-SXM-80GB"
    assert thresholds.sku_for_gpu("NVIDIA GeForce RTX 4090") is None
    assert default_path().resolve() == (Path(__file__).parents[2] / "thresholds.yaml").resolve()


@pytest.mark.parametrize("case", sorted(BAD_SITE_FILES))
def test_bad_site_file_names_file_and_key(tmp_path, case):
    text, expected = BAD_SITE_FILES[case]
    site = tmp_path / "site.yaml"
    site.write_text(text)
    with pytest.raises(ThresholdsError) as info:
        load_thresholds(site)
    assert str(site) in str(info.value) and expected in str(info.value), str(info.value)


def test_site_override_replaces_limit(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("defaults:\n  nofile: {min: 65536, source: 'site policy 2026'}\n")
    thresholds = load_thresholds(site)
    assert thresholds.limits_for("cpu")["nofile"].min == 65536
    assert thresholds.limits_for("cpu")["nofile"].source == "site policy 2026"
    assert thresholds.digest != load_thresholds().digest


def test_bad_thresholds_submit_no_job(tmp_path, dev_cluster):
    site = tmp_path / "bad.yaml"
    site.write_text(BAD_SITE_FILES["min above max"][0])
    before = dev_cluster.last_job_id()
    suite = write_suite(
        tmp_path / "suite",
        "from gpuaccept.probes import specs\n\n"
        "def test_x(node, cluster):\n    cluster.run(specs.HYGIENE, nodes=[node])\n",
    )
    run = run_inner(suite, "--launcher", "slurm", "--thresholds", str(site), env=dev_cluster.env)
    assert run.returncode == 4, run.output[-2000:]
    assert str(site) in run.output and "defaults.nofile" in run.output
    assert dev_cluster.last_job_id() == before, "a job was submitted despite unusable thresholds"
