"""The catalogue's rows of issue 49, "Safe to hand to a tenant": what the next tenant of a node would inherit (the
last job's GPU memory, a driver below a bulletin's fix, a boot chain without Secure Boot, a health agent that is
not running) and a neighbour that slows the other half of a node. Declared here, rendered into docs/faults.md by
faults_page.py beside the other rows; each row's proof is in ``test_tenant_faults.py`` (the real probe code where
it runs without a GPU, the real judges, the real ``Judge`` with the packaged catalogue).

Only the unreadable driver version is end to end (node2's NVML module replaced in its mount namespace): the loopback
nodes are slurmds of one CI VM (one /proc, no GPU, no UEFI), so one node cannot lack an agent another has, and no
GPU memory or neighbour can be measured there. The neighbour row is
proven on GPUs (docs/measurements.md 'GPU VMs, 2026-11-28: storage and tenant safety') and in CI by its judge.
"""

from __future__ import annotations

from .fault_rows import END_TO_END, GPU_RUN, LOGIC, Row

__all__ = ["TENANT", "TENANT_ROWS"]

TENANT = "Safe to hand to a tenant (what the next tenant inherits, and neighbours that slow each other)"
P = "tests/selftest/test_tenant_faults.py::"

TENANT_ROWS: tuple[Row, ...] = (
    Row(
        TENANT,
        "residue-left",
        "the last job's data left in GPU memory for the next job",
        "the residue probe's own fill (this run's seeded pattern) written into 1 MiB of memory, and that memory "
        "handed to its scan unscrubbed at an offset that is no page multiple, beside a zeroed GPU (CPU tensors "
        "through `probes/residue.fill` and `scan`)",
        "`test_gpu_memory_left_between_jobs[node2]` FAILED `gpu_residue_pattern_bytes` = 1048576 B (limit <= 0) on "
        "node2 GPU 1, its pattern's seed and tag beside it; GPU 0 passes and shows what the driver left (zeros)",
        LOGIC,
        (P + "test_residue_left_for_the_next_job_fails_that_gpu",),
    ),
    Row(
        TENANT,
        "residue-inherited",
        "the previous job's data (a fine-tune's weights) in the memory the next process gets",
        "the fill step's first scan of its fresh allocation: random non-zero bytes on GPU 1, zeros on GPU 0 (CPU "
        "tensors through `probes/residue.scan`)",
        "`test_gpu_memory_left_between_jobs[node2]` FAILED `gpu_residue_inherited_nonzero_bytes` (limit <= 0) on "
        "node2 GPU 1 with the commonest words it held; GPU 0 passes (zeros)",
        LOGIC,
        (P + "test_a_previous_jobs_bytes_fail_the_inherited_scan",),
    ),
    Row(
        TENANT,
        "residue-scanner-blind",
        "a scanner that cannot see the pattern (proves nothing clean)",
        "the proof's scan looks for another seed's pattern than it planted (a scan step that planted none is "
        "unmeasured)",
        "`test_gpu_memory_left_between_jobs[node2]` FAILED `gpu_residue_scanner_proof` = `not found in ... bytes "
        "scanned` on node2 GPU 0: a scan that finds nothing proves nothing",
        LOGIC,
        (P + "test_a_blind_scanner_fails_its_proof", P + "test_the_scan_steps_own_proof_is_judged"),
    ),
    Row(
        TENANT,
        "driver-below-fix",
        "a GPU driver below a security bulletin's fix",
        "the software probe's payload of a node with driver 580.95.05, DCGM 4.5.2 and exporter 4.8.1 "
        "(fixtures/tenant/software-580.95.05.json, constructed), against the packaged bulletins",
        "`test_known_vulnerable_software[node2]` FAILED `software_bulletin` on node2 field gpu_driver: `gpu_driver "
        "580.95.05 (fixed in 580.159.03: bulletin 5821 ...)` and `(fixed in 580.126.09: bulletin 5747 ...)`, and on "
        "dcgm and dcgm_exporter (bulletin 5857); 580.159.04 (the GPU VM's) passes",
        LOGIC,
        (P + "test_a_driver_below_a_bulletin_fix_fails_naming_fix_and_bulletin",),
    ),
    Row(
        TENANT,
        "secure-boot-off",
        "Secure Boot off where the site requires it",
        "the trust probe reads a sysfs tree with UEFI and the SecureBoot efivar 0 (fixtures/tenant/"
        "sysfs-secureboot-off) on a site that requires UEFI and Secure Boot (`tenant.root_of_trust`)",
        "`test_root_of_trust[node2]` FAILED `secure_boot` = `disabled` (expected `enabled`) on node2; UEFI passes; "
        "the TPM, not required, is shown",
        LOGIC,
        (P + "test_secure_boot_off_where_required_fails",),
    ),
    Row(
        TENANT,
        "agent-not-running",
        "a declared health agent not running on one node",
        "the agent probe reads a /proc where node1 runs `slurmd` and node2 does not, against the loopback site's "
        "declaration (fixtures/site/loopback-tenant.yaml: agent slurmd)",
        "`test_health_agents[node2]` FAILED `health_agent_running` = `no process named slurmd` on node2 field "
        "slurmd; `test_health_agents[node1]` passes",
        LOGIC,
        (P + "test_an_agent_not_running_on_one_node_fails_that_node",),
    ),
    Row(
        TENANT,
        "neighbour-slows",
        "a neighbour that slows the other half of a node",
        "on 2 x H100 80GB HBM3, `benchmarks/neighbour.py --gpu 0 --mode sm` (a second process's bf16 matmuls) "
        "started when the halves' together phase began; in CI, half A's GPU 0 at 55% of its matmul alone (the "
        "probe's merge of both halves' figures) against the packaged limits",
        "the probe by hand: GPU 0 of half A kept 47.37% of its matmul and 48.86% of its HBM copy alone (below the "
        "floors of 90%), GPU 1 of half B 100.52% and 99.80%; judged (CI's proof on such figures): "
        "`neighbour_matmul_ratio_pct` FAILED on node1 `GPU 0 (...) of half A (GPU 0) beside half B (GPU 1)`, both "
        "figures beside it; a catalogue without limits shows the ratios and the test ERRORs `nothing was judged`",
        GPU_RUN,
        (P + "test_a_slowed_half_fails_naming_both_gpu_sets", P + "test_a_site_without_limits_judges_nothing_and_errs"),
    ),
    Row(
        TENANT,
        "driver-version-unreadable",
        "a GPU driver version that is no version",
        "node2's NVML answers `garbage` for the driver version (pynvml bound over the installed one in node2's mount "
        "namespace, `up.sh --own-mounts`), node1's `580.159.04`; the software probe and the judge run for real "
        "through srun on the loopback cluster",
        "`test_known_vulnerable_software[node2]` ERROR (could not measure) `software_bulletin` on node2 field "
        "gpu_driver: `node2: gpu_driver version 'garbage' is not a version (dotted numbers) a bulletin's fix can be "
        "compared with` (it read `no known-vulnerable version` before: a pass); node1 passes",
        END_TO_END,
        (
            "tests/selftest/test_tenant_unreadable.py::"
            "test_an_unreadable_driver_version_on_one_node_is_could_not_measure_end_to_end",
        ),
    ),
)
