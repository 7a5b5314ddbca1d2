"""The fingerprint names the CPU on aarch64 nodes too: Grace's /proc/cpuinfo has no "model name" line.

The recording is a real Grace's (fixtures/cpuinfo/README.md names where it was published); its lscpu read
"Neoverse-V2", and so must the fingerprint, or every Grace node's CPU would be "unknown" and drift between two
different aarch64 cores would go unseen.
"""

from __future__ import annotations

from pathlib import Path

from gpuaccept.probes.fingerprint import cpu_model

CPUINFO = Path(__file__).resolve().parents[2] / "fixtures" / "cpuinfo"


def test_a_grace_cpu_is_named_as_lscpu_names_it():
    text = (CPUINFO / "grace-neoverse-v2.cpuinfo").read_text()
    assert "model name" not in text
    assert cpu_model(text) == "Neoverse-V2"


def test_an_x86_model_name_is_kept():
    xeon = "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_model(f"processor\t: 0\nmodel name\t: {xeon}\n") == xeon


def test_an_unlisted_arm_core_keeps_its_codes_apart_from_a_listed_one():
    grace = (CPUINFO / "grace-neoverse-v2.cpuinfo").read_text()
    other = grace.replace("0xd4f", "0xd99")
    assert cpu_model(other) == "ARM part 0xd99" != cpu_model(grace)
    assert cpu_model(grace.replace("0x41", "0x61")) == "implementer 0x61 part 0xd4f"


def test_text_without_either_is_unknown():
    assert cpu_model("") == "unknown"
