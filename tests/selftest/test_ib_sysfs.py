"""InfiniBand probe and judge on the recorded-shape sysfs tree in fixtures/sysfs/, one fault at a time."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

from gpuaccept.judging.judge import Judge
from gpuaccept.probes import infiniband
from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.loader import load_thresholds as _load
from gpuaccept.verdicts.infiniband import judge_ib, parse_rate, parse_state

from .ending import ends

pytestmark = pytest.mark.selftest


@functools.cache
def load_thresholds(site: Path | None = None) -> Thresholds:
    """The packaged thresholds (plus a site file), validated once per module: pydantic takes ~0.5 s."""
    return _load(site)


REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "fixtures" / "sysfs" / "hgx-h100-ndr"


def checker(sku: str = "H100-SXM-80GB", site: Path | None = None) -> Judge:
    return Judge(load_thresholds(site), lambda node: sku, lambda result: None, "selftest")


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A private copy of the healthy node's sysfs, to break."""
    shutil.copytree(TREE, tmp_path / "sys")
    return tmp_path / "sys"


def port(tree: Path, hca: str) -> Path:
    return tree / "class" / "infiniband" / hca / "ports" / "1"


def test_parse_values() -> None:
    assert parse_state("4: ACTIVE") == "ACTIVE" and parse_state("5: LinkUp") == "LinkUp"
    assert parse_state("3: Disabled") == "Disabled" and parse_state(None) is None
    assert parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("garbage") is None


def test_probe_reads_the_tree() -> None:
    data = infiniband.collect(TREE)
    assert data["present"] and len(data["hcas"]) == 10
    hca = data["hcas"]["mlx5_3"]
    assert hca["pci"] == "0000:5e:00.0" and hca["numa_node"] == 0 and hca["hca_type"] == "MT4129"
    assert hca["ports"]["1"]["rate"] == "400 Gb/sec (4X NDR)"
    assert hca["ports"]["1"]["counters"]["symbol_error"] == 0


def test_healthy_hgx_h100_passes() -> None:
    judge = checker()
    judge_ib(infiniband.collect(TREE), judge, "n1")
    count = next(r for r in judge.results if r.metric == "ib_hca_count")
    assert count.value == 8 and count.extra["other_devices"] == ["mlx5_8", "mlx5_9"]
    other = [r for r in judge.results if r.subject and r.subject.startswith("mlx5_8")]
    assert [(r.metric, r.value, r.verdict) for r in other] == [("ib_link_layer", "Ethernet", "info")]  # listed


def test_link_layer_recorded_before_the_filter_and_judged_by_the_count() -> None:
    """Every port's link layer is on the record (compute or not); none is a check after the filter that
    kept only that link layer (it could not fail): a wrong layer shows as a short ib_hca_count."""
    judge = checker()
    judge_ib(infiniband.collect(TREE), judge, "n1")
    layers = {r.subject: (r.value, r.extra["compute"]) for r in judge.results if r.metric == "ib_link_layer"}
    assert len(layers) == 10 and layers["mlx5_9 port 1"] == ("Ethernet", False)
    assert layers["mlx5_0 port 1"] == ("InfiniBand", True)
    assert all(r.verdict == "info" for r in judge.results if r.metric == "ib_link_layer")


def test_port_down_fails_naming_the_port(tree: Path) -> None:
    (port(tree, "mlx5_2") / "state").write_text("1: DOWN\n")
    (port(tree, "mlx5_2") / "phys_state").write_text("3: Disabled\n")
    j = checker()
    with ends(j, "failed") as caught:
        judge_ib(infiniband.collect(tree), j, "n1")
    assert "n1 HCA mlx5_2 port 1: ib_port_state = DOWN" in str(caught.value)
    assert "ib_port_phys_state = Disabled" in str(caught.value)


def test_hdr_rate_and_symbol_errors_fail(tree: Path) -> None:
    (port(tree, "mlx5_6") / "rate").write_text("200 Gb/sec (4X HDR)\n")
    (port(tree, "mlx5_1") / "counters" / "symbol_error").write_text("1207\n")
    j = checker()
    with ends(j, "failed") as caught:
        judge_ib(infiniband.collect(tree), j, "n1")
    assert "mlx5_6 port 1: ib_port_rate_gbps = 200" in str(caught.value)
    assert "mlx5_1 port 1: ib_symbol_errors = 1207" in str(caught.value)


def test_missing_hca_and_ethernet_misconfig_count_short(tree: Path) -> None:
    shutil.rmtree(tree / "class" / "infiniband" / "mlx5_7")
    (port(tree, "mlx5_0") / "link_layer").write_text("Ethernet\n")
    j = checker()
    with ends(j, "failed", match=r"ib_hca_count = 6 HCAs \(limit >= 8"):
        judge_ib(infiniband.collect(tree), j, "n1")


def test_node_expected_to_have_ib_with_none_fails(tmp_path: Path) -> None:
    data = infiniband.collect(tmp_path)  # no class/infiniband at all
    assert {k: data[k] for k in ("present", "path", "hcas")} == {
        "present": False,
        "path": str(tmp_path / "class" / "infiniband"),
        "hcas": {},
    }
    assert data["monotonic"] > 0  # a reading without HCAs still brackets a window
    j = checker("H200")
    with ends(j, "failed", match=r"ib_hca_count = 0 HCAs \(limit >= 8"):
        judge_ib(data, j, "n1")


def test_the_multi_gpu_h200_site_file_declares_no_ib(tmp_path: Path) -> None:
    judge = checker("H200", REPO / "fixtures" / "site" / "h200-multi-gpu-no-ib.yaml")
    judge_ib(infiniband.collect(tmp_path), judge, "vm")
    assert [(r.metric, r.value, r.verdict) for r in judge.results] == [("ib_hca_count", 0, "pass")]


def test_cpu_sku_declares_no_expectation() -> None:
    """The acceptance test skips a cpu node without HCAs; a cpu node with HCAs still has its ports judged."""
    thresholds = load_thresholds()
    assert "ib_hca_count" not in thresholds.limits_for("cpu")
    assert "ib_hca_count" not in thresholds.limits_for("L40S")
    judge = checker("cpu")
    judge_ib(infiniband.collect(TREE), judge, "c1")
    assert next(r for r in judge.results if r.metric == "ib_hca_count").verdict == "info"
    assert next(r for r in judge.results if r.metric == "ib_port_state").verdict == "pass"


def test_unreadable_port_is_an_error(tree: Path) -> None:
    (port(tree, "mlx5_4") / "rate").write_text("unknown\n")
    j = checker()
    with ends(j, "error", match=r"mlx5_4 port 1: ib_port_rate_gbps \(rate 'unknown' is not a rate\)"):
        judge_ib(infiniband.collect(tree), j, "n1")
