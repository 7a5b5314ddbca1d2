"""The storage faults of docs/faults.md: each made for real on one loopback node (test_faults_storage.py)."""

from __future__ import annotations

from .fault_rows import END_TO_END, Row

__all__ = ["STORAGE", "STORAGE_ROWS"]

STORAGE = (
    "Storage (one loopback node's filesystem broken for real in its own mount namespace: `up.sh --own-mounts`, "
    "`node-exec.sh`)"
)
P = "tests/selftest/test_faults_storage.py::"
NAMED = P + "test_the_faulty_node_is_named_with_the_path"
ONLY = P + "test_only_node2_fails_and_node1_is_judged"
M = "tests/selftest/test_faults_storage_midrun.py::"
NODE1 = M + "test_node1_is_judged_as_usual"
BOUND = M + "test_the_section_costs_about_two_stall_limits_per_hung_path"
MIDRUN = (
    "four shared filesystems; node2 sees each through a FUSE mount (bindfs) in its own namespace, node1 the folder "
    "itself; a host watcher stops (SIGSTOP) that bindfs daemon "
)
HELD = (
    "; every later phase and test on that path on node2 is not launched: could not measure, `not run: <path> on "
    "node2 stalled at <time> in <test> (FAILED there)`; node1 judged as usual; the section within the healthy one's "
    "wall + 2 x the 5 s stall limit per hung path (+ 60 s for CI's cores: here 101 s against a healthy 94 s, 4 paths)"
)

STORAGE_ROWS: tuple[Row, ...] = (
    Row(
        STORAGE,
        "slow-filesystem",
        "one node's filesystem slow",
        "a loop-mounted ext4 declared shared; node2's slurmd (and so its steps) in a cgroup v1 blkio group throttling "
        "that loop device to 5 MB/s both ways (dm-delay is not in this kernel; direct I/O and fsync meet the throttle)",
        "`test_storage_throughput` FAILED: node2's `storage_write_gbps` = 0.0052 GB/s (limit >= 0.05) and "
        "`storage_read_gbps`, and `storage_median_share_pct` below the median of the nodes alone; node1 passes",
        END_TO_END,
        (NAMED, ONLY),
    ),
    Row(
        STORAGE,
        "full-path",
        "a declared path full on one node",
        "node2 sees a 64 KiB tmpfs at the declared path",
        "`storage_path_usable` = `full: ... 0.00 GiB free, this run writes ...` on node2 with the path (throughput), "
        "`storage_free_gib` below the site's `free_gib` (mounts); node1's figures judged as healthy",
        END_TO_END,
        (NAMED, ONLY),
    ),
    Row(
        STORAGE,
        "read-only-path",
        "a declared path read-only on one node",
        "node2 sees a read-only bind mount at the declared path",
        "`storage_path_usable` = `read-only: ... Read-only file system` on node2 with the path",
        END_TO_END,
        (NAMED, ONLY),
    ),
    Row(
        STORAGE,
        "missing-path",
        "a declared path not mounted on one node",
        "node2 sees an empty tmpfs over the path's parent: the declared path is not there",
        "`storage_path_usable` = `missing: <path>` on node2",
        END_TO_END,
        (NAMED, ONLY),
    ),
    Row(
        STORAGE,
        "hung-mount",
        "an I/O that stops answering",
        "a FUSE mount (bindfs) at the path in node2's namespace, its daemon stopped with SIGSTOP",
        "`storage_path_usable` = `stalled: ... stat <path> did not return within 5 s` (throughput) on node2, at the "
        "site's stall limit (default 60 s: NVIDIA's 2026 requirements count an I/O stalled past 60 s as "
        "unavailability); the mounts test does not look there again: `not run: <path> on node2 stalled at <time> in "
        "test_storage_throughput (FAILED there)`; the run is never waited on without end",
        END_TO_END,
        (NAMED, P + "test_the_hung_mount_is_named_within_the_stall_limit"),
    ),
    Row(
        STORAGE,
        "fio-missing",
        "fio not installed on one node",
        "`/dev/null` bound over fio in node2's mount namespace",
        "`test_storage_throughput` NOT RUN naming fio and node2: never a pass",
        END_TO_END,
        (P + "test_fio_missing_on_a_node_is_not_run_naming_it",),
    ),
    Row(
        STORAGE,
        "checkpoint-changed",
        "a checkpoint file changed between save and restore",
        "the real checkpoint probe saves, one bit of a safetensors shard is flipped on disk, the probe restores",
        "`checkpoint_bytes` FAILED on the restoring node naming the shard: `<file>: sha256 <read>, <written>`",
        END_TO_END,
        (P + "test_a_checkpoint_changed_between_save_and_restore_names_the_file_and_node",),
    ),
    Row(
        STORAGE,
        "hung-during-write",
        "a mount that stops answering during fio's write",
        MIDRUN + "once node2's fio file has three quarters of its 256 MiB on disk",
        "`test_storage_throughput` FAILED `storage_path_usable` on node2: `stalled: node2: fio write in <path>/"
        "gpuaccept-<token>/node2 made no progress for 5 s (stall limit 5 s) at write, 190 of 256 MiB moved`, at the "
        "stall limit (fio's 250 ms reports), fio and its jobs killed; one SIGKILL could not end is named (`a fio job "
        "(pid N) in state D: ... left`)" + HELD,
        END_TO_END,
        (M + "test_the_mount_stopping_during_fios_write_is_named_and_held", NODE1, BOUND),
    ),
    Row(
        STORAGE,
        "hung-during-read",
        "a mount that stops answering during fio's read",
        MIDRUN + "once node2's fio has read three quarters of node1's 256 MiB file there (its rchar)",
        "`test_storage_throughput` FAILED `storage_path_usable` on node2: `stalled: node2: fio read in <path>/"
        "gpuaccept-<token>/node1 made no progress for 5 s (stall limit 5 s) at read, 184 of 256 MiB moved; a fio job "
        "(pid N) in state D: in the kernel, a kill does not end it, left`" + HELD,
        END_TO_END,
        (M + "test_the_mount_stopping_during_fios_read_is_named_and_held", NODE1, BOUND),
    ),
    Row(
        STORAGE,
        "hung-during-metadata",
        "a mount that stops answering during the metadata phase",
        MIDRUN + "once node2's metadata probe (fsmeta) starts there",
        "`test_storage_metadata` FAILED `storage_path_usable` on node2: `stalled: set up: mkdir <path>/gpuaccept-"
        "fsmeta-<token> did not return in 5 s`; node1, which waited on node2 in the shared step, could not measure "
        "(never failed); coherency and checkpoint there not run on node2" + HELD,
        END_TO_END,
        (M + "test_the_mount_stopping_during_the_metadata_phase_is_named_and_held", NODE1, BOUND),
    ),
    Row(
        STORAGE,
        "hung-during-checkpoint",
        "a mount that stops answering during the checkpoint",
        MIDRUN + "once node2's checkpoint restore starts there (node1 saved it)",
        "`test_checkpoint` FAILED `storage_path_usable` on node2: `stalled: restore: read <path>/gpuaccept-<token>/"
        "checkpoint/manifest.json did not return within 5 s`; node1's save judged; the clean-up on node1" + HELD,
        END_TO_END,
        (M + "test_the_mount_stopping_during_the_checkpoint_is_named", NODE1, BOUND),
    ),
)
