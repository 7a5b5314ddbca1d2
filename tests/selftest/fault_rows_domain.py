"""The catalogue's rows of issue 56's Slurm side, "The NVLink domain is a Slurm block" and "IMEX per job": a block
whose trays are not those the site bought, a node in another block's clique, and an IMEX domain that is not the
job's (a member UNAVAILABLE, a version mismatch, an extra member), a step without its channel, and a slow tray.
Declared here,
rendered into docs/faults.md by faults_page.py beside the other rows.

The IMEX and tray rows are end to end: the real acceptance file (``tests/acceptance/test_nvlink_domain.py``) runs
through salloc/srun on a Slurm 26.05 dev cluster of two blocks of 2 nodes with ``switch/nvidia_imex`` (real blocks,
real channels), ``nvidia-imex-ctl`` being a recording put first on PATH (``fixtures/imex/``: published outputs and
named edits), so the probe's parser runs; the channel row runs on a 26.05 block without the IMEX plugin, the
slow-tray row on 8 nodes in two blocks of 4 (NCCL's bisection needs peers in the block to pair a suspect with). The
clique row waits on the fingerprint's fabric cliques (helper nvlgpu's): its judge is proven on its own.
"""

from __future__ import annotations

from .fault_rows import END_TO_END, LOGIC, Row

__all__ = ["DOMAIN", "DOMAIN_ROWS"]

DOMAIN = "NVLink domains: Slurm blocks and IMEX (Slurm 26.05 dev cluster, 2 blocks of 2 nodes, switch/nvidia_imex)"
E2E = "tests/selftest/test_topology_block.py::test_domain_faults_end_to_end"
B = "tests/selftest/test_topology_block.py::"
IM = "tests/selftest/test_imex.py::"

DOMAIN_ROWS: tuple[Row, ...] = (
    Row(
        DOMAIN,
        "imex-member-unavailable",
        "an IMEX domain member not READY (its daemon down or unreachable)",
        "`nvidia-imex-ctl -N` answers with fixtures/imex/loopback-b1.unavailable.txt (the published 2-node output, "
        "node2's member `UNAVAILABLE`, its cells `I`, `Domain State: DEGRADED`)",
        "`test_imex_domain` FAILED: `imex_members_ready` = `127.0.0.1 (node2) UNAVAILABLE` on node2, "
        "`imex_connectivity` and `imex_domain_state` (DEGRADED != UP) on both nodes",
        END_TO_END,
        (E2E + "[imex-member-unavailable]", IM + "test_unavailable_member_fails_naming_its_node"),
    ),
    Row(
        DOMAIN,
        "imex-version-mismatch",
        "IMEX daemons of two versions (`!V!`: communication disabled) while the domain still reads UP",
        "fixtures/imex/loopback-b1.version-mismatch.txt: the cells between the two members `!V!`, Domain State left UP",
        "`test_imex_domain` FAILED: `imex_connectivity` = `127.0.0.1 (node1) -> 127.0.0.1 (node2): !V!; ...` on both "
        "nodes; `imex_domain_state` passes (UP), so only the table catches it",
        END_TO_END,
        (E2E + "[imex-version-mismatch]", IM + "test_version_mismatch_fails_connectivity_though_the_domain_reads_up"),
    ),
    Row(
        DOMAIN,
        "imex-extra-member",
        "an IMEX domain holding a node outside the job (a tenancy finding: it could import the job's memory)",
        "fixtures/imex/loopback-b1.extra-member.txt: a third READY, connected member, node3 (another block's, not "
        "allocated)",
        "`test_imex_domain` FAILED: `imex_extra_member` = `127.0.0.1 (node3)` (limit == none) on node1 and node2; "
        "`imex_members` passes (the job's two nodes are there)",
        END_TO_END,
        (E2E + "[imex-extra-member]", IM + "test_extra_member_is_a_tenancy_finding"),
    ),
    Row(
        DOMAIN,
        "block-short-of-a-tray",
        "a block short of a compute tray the site bought",
        "a site file declaring block b1's trays as node[1-2] and node9 (Slurm's b1 holds node1 and node2)",
        "`test_nvlink_block_trays` FAILED: `nvlink_block_trays` = `missing node9` (limit == all 3 trays) naming "
        "node9; a tray listed in `out` is no finding",
        END_TO_END,
        (E2E + "[block-short-of-a-tray]", B + "test_block_short_of_a_tray_fails_naming_it_unless_listed_out"),
    ),
    Row(
        DOMAIN,
        "node-in-another-blocks-clique",
        "a node whose GPUs are in another block's NVLink clique (cabled to the other rack's switches)",
        "cliques (ClusterUUID, CliqueId) per node handed to the judge: node3 of block b2 in b1's clique",
        "`nvlink_clique_one_block` FAILED naming node3 (`blocks b1: node1, node2; b2: node3`) and "
        "`nvlink_block_one_clique` FAILED for b2 naming node3; CliqueId 32766 on two racks with distinct UUIDs "
        "is two cliques",
        LOGIC,
        (
            B + "test_a_node_in_another_blocks_clique_fails_naming_it",
            B + "test_placeholder_clique_id_with_distinct_uuids_is_two_cliques",
        ),
    ),
    Row(
        DOMAIN,
        "slow-tray",
        "a slow compute tray in an NVLink domain (judged against its block peers: no domain floor below 72 GPUs)",
        "`GPUACCEPT_FAULT_SLOW_NODE=node4` (`_SLOW_S=0.05`): block b1's fourth tray's NCCL ranks sleep before every "
        "collective launch; 8 nodes under 26.05 in blocks b1 = node[1-4] and b2 = node[5-8], gloo, the site's "
        "`straggler_pct` 95 (healthy loopback pairs spread up to 4.7x; the slowed tray is 1.1% of its peers)",
        "`test_domain_tray_at_fault` FAILED: `nccl_node_verdict = at fault` on node4 alone (its pair node3+node4 "
        "straggles 13x below node1+node2 and misses the CPU SKU's 2-node floor; paired with known-good node2 it "
        "still fails); node3 cleared by its pair with node1; every tray of b2 passes",
        END_TO_END,
        (B + "test_domain_slow_tray_end_to_end",),
    ),
    Row(
        DOMAIN,
        "imex-channel-missing",
        "a step given no IMEX channel (the plugin off, or the channel folder missing)",
        "a Slurm 26.05 cluster of one block without switch/nvidia_imex: the steps get no "
        "/dev/nvidia-caps-imex-channels/channelN",
        "`test_imex_channel` FAILED: `imex_channel` = `missing` (limit == present) on node1 and node2, the IMEX "
        "domain passing; with the plugin, a real channel without an IMEX driver is `present` and its open is "
        "unmeasured (ENXIO), never passed",
        END_TO_END,
        (
            B + "test_domain_channel_missing_end_to_end",
            IM + "test_missing_channel_fails",
            IM + "test_channel_without_a_driver_is_unmeasured_never_passed",
        ),
    ),
)
