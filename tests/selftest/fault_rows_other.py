"""The catalogue's rows that the test seam does not inject: the scheduler's faults (injected with Slurm
itself), the plugin's verdict rules, NCCL, training and fabric faults, and the faults only a GPU can
show (proven by a recorded GPU run, cited from docs/measurements.md). Declared here, rendered into
docs/faults.md by faults_page.py beside fault_rows.LOOPBACK_ROWS.
"""

from __future__ import annotations

from .fault_rows import END_TO_END, FABRIC, GPU_RUN, HW, LOGIC, NCCL, Row

__all__ = ["OTHER_ROWS", "SECTIONS"]

SCHED = "The scheduler (faults injected with Slurm itself on a loopback cluster)"
RULES = "Verdicts that are not earned (an inner suite of careless tests, through salloc on the loopback cluster)"
GPU = "Faults only a GPU can show"
CHAOS = (
    "A node lost, a step cancelled, the controller restarted, a full disk: the chaos matrix (3 loopback nodes, "
    "every multi-node test)"
)
SECTIONS = (SCHED, CHAOS, RULES, HW, GPU, NCCL, FABRIC)

A = "tests/selftest/test_allocation_faults.py::"
D = "tests/selftest/test_dispatch_faults.py::"
C = "tests/selftest/test_chaos.py::test_chaos"
#: CI's one run of both faults that lose no node (the others run alone under GPUACCEPT_CHAOS_ALL=1)
MERGED = "scancel-nccl_rails+ctld-restart-nccl_scale"
MULTI = (
    "`test_versions_consistent`, `test_nccl_scale`, `test_nccl_node_at_fault`, `test_nccl_rails`, "
    "`test_shared_filesystem`, `test_node_clocks` in turn (`tests/selftest/chaos_plugin.py` picks the moment; "
    "the drift test takes no step of its own, so only before; the bad-node verdicts `test_nccl_node_at_fault` "
    "judge the scale steps they share with `test_nccl_scale` and run on the survivors in every `nccl_scale` row)"
)
SURVIVE = (
    "node1 and node3 end every test from the broken one on as a clean run of node1 and node3 alone "
    "(`--nodelist node1,node3`) does; no verdict is an exception's text; the record and `summary.html` are "
    "written; no job is left running"
)
LOST = (
    "node2 is left out of every later step: a cross-node test whose step lost it measures node1 and node3 "
    "again (`test_nccl_scale[all-3-nodes]` measures all 2 nodes left, `[2-nodes]` skips `scale 2 is now "
    "measured as all 2 nodes left (node2 was lost during the run: ...)`), a second-pass pair that lost it is "
    "incomplete and blames nobody; node2 is named once: its next node-local case ERRORs (`test_dev_shm_free"
    "[node2]`, or `test_step_runs[node2]` after the clock test), later ones and `test_nccl_node_at_fault[node2]` "
    "skip `node2 was lost during the run: ...`; "
    "`cluster.lost_nodes = {node2: ...}`, the terminal's `node2: lost during the run`. "
)
V = "tests/selftest/test_verdict_rules.py::"

OTHER_ROWS: tuple[Row, ...] = (
    # ---- the scheduler -------------------------------------------------------------------------------
    Row(
        SCHED,
        "down-node",
        "down node at allocation",
        "`kill-node.sh node2` (SIGKILL its slurmd), wait until the controller marks it not responding, then "
        "`pytest -m acceptance --launcher slurm --nodes 2`",
        "no test runs; exit 4 in seconds: `2 node(s) wanted (--nodes (command line)) but partition main has 1 usable "
        "(node1); not usable: node2 (idle*, not responding)` (later `down*, reason: Not responding`)",
        END_TO_END,
        (A + "test_down_node_stops_the_run_naming_it",),
    ),
    Row(
        SCHED,
        "drained-node",
        "drained node at allocation",
        "`scontrol update nodename=node2 state=drain reason=...`",
        "exit 4: `not usable: node2 (drained, reason: <Slurm's Reason field>)`; with `--nodelist node1,node2` the "
        "same node named",
        END_TO_END,
        (A + "test_drained_node_is_named_with_its_reason",),
    ),
    Row(
        SCHED,
        "busy-nodes",
        "nodes busy, allocation pends",
        "another job holds both nodes (`salloc --exclusive -N2`)",
        "`gpuaccept: waiting for Slurm job N ...: PENDING, reason Resources (...)` every 5 s; after `--alloc-wait` the "
        "job is cancelled and exit 4 names the reason, every node's state and the job holding them",
        END_TO_END,
        (A + "test_busy_nodes_print_the_pending_reason_then_give_up",),
    ),
    Row(
        SCHED,
        "partition",
        "mistyped partition",
        "`--launcher auto --partition nosuchpart`",
        "exit 4: `partition 'nosuchpart' (--partition (command line)): Slurm says: ... Partition nosuchpart not found`",
        END_TO_END,
        (A + "test_mistyped_partition_is_usage_error",),
    ),
    Row(
        SCHED,
        "controller-down",
        "controller down",
        "SIGKILL the cluster's slurmctld before the run",
        "exit 4: `the Slurm controller does not answer (SLURM_CONF=...): scontrol ping: exit 1: Slurmctld(primary) "
        "at <host> is DOWN`",
        END_TO_END,
        (A + "test_controller_down_is_usage_error",),
    ),
    Row(
        SCHED,
        "scontrol-failure",
        "scontrol failure on a node",
        "SIGKILL slurmctld mid-run, then a test asks for the node's declared GPUs",
        'that node\'s test ERROR: `nodeN: cannot read its declared GPUs from Slurm: ...` (never "0 GPUs, skipped"); '
        "the failed release of the allocation is printed with the `scancel` to run by hand",
        END_TO_END,
        (A + "test_scontrol_failure_is_an_error_naming_the_node",),
    ),
    Row(
        SCHED,
        "interrupt",
        "Ctrl-C / SIGTERM mid-step",
        "SIGINT or SIGTERM to pytest while a probe step hangs (the inner pytest started with default signal "
        "dispositions, even from a background CI)",
        "run ends `interrupted` (exit 2), the step and the allocation are cancelled, the run record is written",
        END_TO_END,
        ("tests/selftest/test_interrupt.py::test_signal_cancels_allocation[SIGINT]", "`[SIGTERM]`"),
    ),
    Row(
        SCHED,
        "killed-slurmd",
        "killed slurmd mid-run",
        "4-node loopback cluster; `kill-node.sh node3` from inside the session; the run then waits (up to "
        "2 x `SlurmdTimeout` + 10 s, `SlurmdTimeout=30` in `up.sh`) until `sinfo` shows node3 `down`, and goes on",
        "the allocation is made with `--no-kill`, so Slurm takes node3 out of the job instead of expiring it (without "
        "`--no-kill` the whole job expired and every node's later tests errored `Slurm job N has expired`). node3's "
        "next test ERRORs `... the step did not start on node3 (its slurmd did not take it ...)`; its later tests "
        "skip `node3 was lost during the run: its slurmd did not take a step (...)`; node1, node2 and node4 pass "
        "every node-local test before and after Slurm marked node3 down; the summary prints `node3 ERROR` and "
        "`node3: lost during the run: ...`; the record has `cluster.lost_nodes = {node3: ...}`, status `failed`; "
        "no job is left (`squeue` empty)",
        END_TO_END,
        ("tests/selftest/test_node_death.py::test_killed_slurmd",),
    ),
    Row(
        SCHED,
        "hanging-probe",
        "hanging probe",
        "`_faults --fault hang` on 2 ranks",
        "the test ERRORs: `probe _faults on node1: no result within 8 s; step gpuaccept-... cancelled; ranks [0, 1] on "
        "node1 did not finish`; no step or job left",
        END_TO_END,
        (D + "test_faults_slurm",),
    ),
    Row(
        SCHED,
        "probe-crash",
        "probe crash, malformed or missing output",
        "`_faults --fault exit3`, `garbage`, `short`",
        "the test ERRORs: `exit status 3`, `malformed result line`, `1 of 2 ranks reported`",
        END_TO_END,
        (D + "test_faults_slurm",),
    ),
    Row(
        SCHED,
        "fanout-fault",
        "one node's probe crashes, hangs or prints garbage in a fan-out step",
        "`_faults --fault exit3/hang/garbage --on node2`, one step for both nodes",
        "node2's case ERRORs naming node2 (`exit status 3`, `no result within 8 s; ranks [0, 1] on node2 did not "
        "finish`, `malformed result line`); node1's case of the same step passes",
        END_TO_END,
        (D + "test_fanout_slices_and_one_node_faults",),
    ),
    # ---- the chaos matrix -------------------------------------------------------------------------------
    Row(
        CHAOS,
        "chaos-kill-before",
        "a node lost before a multi-node test's first step",
        "`kill-node.sh node2` as the test starts: " + MULTI,
        LOST + SURVIVE,
        END_TO_END,
        (f"{C}[kill-before-nccl_scale]", "`GPUACCEPT_CHAOS_ALL=1`: every `kill-before-*` row"),
    ),
    Row(
        CHAOS,
        "chaos-kill-during",
        "a node lost during a multi-node test's step",
        "`kill-node.sh node2` half a second into the test's first srun step: " + MULTI,
        "the step itself ends (node2's slurmstepd outlives its slurmd); the next step finds node2 gone. "
        + LOST
        + SURVIVE,
        END_TO_END,
        (f"{C}[kill-during-shared_filesystem]", "`GPUACCEPT_CHAOS_ALL=1`: every `kill-during-*` row"),
    ),
    Row(
        CHAOS,
        "chaos-kill-between",
        "a node lost between a multi-node test's steps",
        "`kill-node.sh node2` right after the test's first srun step: " + MULTI,
        LOST + SURVIVE,
        END_TO_END,
        (f"{C}[kill-between-nccl_rails]", "`GPUACCEPT_CHAOS_ALL=1`: every `kill-between-*` row"),
    ),
    Row(
        CHAOS,
        "chaos-second-pass",
        "a node lost during the bad-node test's second pass",
        "node3's NCCL ranks slowed (`GPUACCEPT_FAULT_SLOW_NODE=node3`, `GPUACCEPT_FAULT_SLOW_S=0.05`) so its group "
        "fails at scale 3 and `test_nccl_node_at_fault[node3]` pairs it with the known-good node1; `kill-node.sh "
        "node1` as that case starts, so the pair's own step finds node1 gone (`--nodes 3`)",
        "the pair with node1 is incomplete and blames nobody; node3 is paired again with node2, the good node left "
        "(`nccl.plan.pair_rounds`; before: node3 read `nccl_node_verdict = undetermined`, no partner left to tell it "
        "apart), and node2 and node3 end `test_nccl_node_at_fault` as the same run without the kill does (node2 "
        "passed, node3 FAILED `at fault`); node1 is named once: `test_dev_shm_free[node1]` ERRORs, later cases skip. "
        "Only under `GPUACCEPT_CHAOS_ALL=1` (2 three-node runs, about 2.5 minutes on 2 cores)",
        END_TO_END,
        (f"{C}[kill-before-nccl_node_at_fault-second_pass]", "tests/selftest/test_nccl_second_pass.py"),
    ),
    Row(
        CHAOS,
        "chaos-three-survivors",
        "a node lost among 4: three survivors",
        "a 4-node loopback cluster, `kill-node.sh node4` as `test_nccl_scale` starts (`--nodes 4`)",
        "node4 is left out of every later step and named once (`test_dev_shm_free[node4]` ERRORs, later cases "
        "skip); node1, node2 and node3 end every test from `test_nccl_scale` on as a clean run of node1-node3 alone "
        "(`--nodelist node1,node2,node3` on the same cluster) does, `test_nccl_scale[all-4-nodes]` measuring all 3 "
        "nodes left. On 2 shared cores both runs FAIL the scale-3 `nccl_scaling_efficiency_pct` floor (32-46 % "
        "against 90 %, 3 ranks on 2 cores) and both find node3 `at fault` in the second pass: a loopback artefact, "
        "the same in both, so no survivor is blamed differently. Only under `GPUACCEPT_CHAOS_ALL=1` (a 4-node and a "
        "3-node run, about 1.5 minutes)",
        END_TO_END,
        (f"{C}[kill-before-nccl_scale-4_nodes]",),
    ),
    Row(
        CHAOS,
        "chaos-scancel",
        "one srun step cancelled (`scancel`)",
        "`scancel` of the test's first step while it runs (`test_nccl_rails`, `test_shared_filesystem`), "
        "`--nodelist node1,node3`",
        "that test ERRORs naming the step Slurm cancelled (`test_nccl_rails` ERROR `probe infiniband on node1: "
        "killed by signal SIGKILL ... slurmstepd-node1: error: *** STEP N.3 ON node1 CANCELLED AT ...`, category "
        "could not measure, no check on any node), no node is counted lost, every other test as in the clean run. "
        + SURVIVE,
        END_TO_END,
        (f"{C}[{MERGED}]", f"{C}[scancel-nccl_rails]", f"{C}[scancel-shared_filesystem]"),
    ),
    Row(
        CHAOS,
        "chaos-ctld-restart",
        "slurmctld restarted mid-run, its state kept",
        "`slurm/dev-cluster/restart-ctld.sh` (SIGTERM, then slurmctld again without `-c`, as a production "
        "controller restarts) just before the test's first step (`test_nccl_scale`, `test_shared_filesystem`)",
        "the allocation survives the restart and the run goes on: every test as in the clean run. For a few "
        "seconds after the restart srun cannot create a step (`Unable to create step for job N: Memory required by "
        "task is not available`, until the nodes register again; before the fix every later test ERRORed so): the "
        "dispatcher asks again for up to 60 s (`dispatch/slurm.py` `TRANSIENT_STEP`). " + SURVIVE,
        END_TO_END,
        (f"{C}[{MERGED}]", f"{C}[ctld-restart-nccl_scale]", f"{C}[ctld-restart-shared_filesystem]"),
    ),
    Row(
        CHAOS,
        "chaos-full-fs",
        "the run record on a full filesystem",
        "`--run-record` on a filled 64 KiB tmpfs",
        "the start-up check finds the folder writable (an empty file still fits); at session end the run says "
        "`gpuaccept: could not write the run record: [Errno 28] No space left on device` and exits non-zero, never "
        "0 (before: a traceback of `OSError` from `RunRecord.write` and exit 1, a hardware failure's code); no job is "
        "left",
        END_TO_END,
        (f"{C}[full-fs]",),
    ),
    # ---- the plugin's verdict rules --------------------------------------------------------------------
    Row(
        RULES,
        "info-only",
        "a test passes on informational figures alone",
        "an acceptance test that only calls `judge.info`",
        "ERROR `nothing was judged, so nothing can pass (only informational figures: memory_gib)`, "
        "category could not measure",
        END_TO_END,
        (V + "test_verdict_follows_the_checks",),
    ),
    Row(
        RULES,
        "nothing-recorded",
        "a test asserts but records nothing",
        "`assert cluster.nodes` and return",
        "ERROR `... (nothing was measured)`",
        END_TO_END,
        (V + "test_verdict_follows_the_checks",),
    ),
    Row(
        RULES,
        "miss-returned",
        "a test returns after a miss",
        "`judge.check` below the floor, then return",
        "FAILED naming node, metric, value, limit",
        END_TO_END,
        (V + "test_verdict_follows_the_checks",),
    ),
    Row(
        RULES,
        "no-limit",
        "a metric the SKU has no limit for",
        '`judge.check("matmul_bf16_tflops", ...)` on the `cpu` SKU',
        "ERROR `cannot judge matmul_bf16_tflops on SKU cpu: no limit (add one in a site file)`",
        END_TO_END,
        (V + "test_verdict_follows_the_checks", V + "test_judge_alone_errors_on_a_missing_limit"),
    ),
    Row(
        RULES,
        "bad-thresholds",
        "an unusable thresholds file",
        "a site file with a limit written twice, or min above max",
        "usage error (exit 4) naming file and key, before any job: the loopback run submits none",
        END_TO_END,
        (
            "tests/selftest/test_thresholds_file.py::test_bad_thresholds_submit_no_job",
            "tests/selftest/test_thresholds_file.py::test_bad_site_file_names_file_and_key[duplicate key]",
        ),
    ),
    Row(
        RULES,
        "suite-error",
        "a bug of ours in a judging call",
        "every `judge.check` and `judge.expect` raises `KeyError` (`-p tests.selftest._raise_in_judge`) in the "
        "GPU-health, interconnect, environment, hygiene, node-state and fabric tests, 2 loopback nodes reading the "
        "recorded healthy H200 through the test seam",
        "every test that reached its judging ERRORs, category `suite error`: `suite error: KeyError: '...' raised at "
        "tests/selftest/_raise_in_judge.py:16 in <test>; the suite could not judge this test (a fault of gpuaccept, "
        "not of the hardware)`; none FAILED, nothing drained, exit 6, the verdict `NOT ACCEPTED: ...; the suite could "
        "not judge 23 tests (suite error: a fault of the suite, not of the hardware)`",
        END_TO_END,
        (
            "tests/selftest/test_suite_errors.py::test_no_test_fails_and_each_area_has_a_suite_error",
            "tests/selftest/test_suite_errors.py::test_the_session_says_the_suite_could_not_judge",
        ),
    ),
    Row(
        RULES,
        "test-hook",
        "a test hook set on the run",
        "`GPUACCEPT_TEST_INJECT` set to an empty file (or to `{}`: "
        "no readings, the probes read the machine), `GPUACCEPT_SELFTEST` unset",
        "`NOT ACCEPTED: test hooks active: GPUACCEPT_TEST_INJECT`; the record's `test_hooks` names it where it was "
        "set (the pytest process, the probes' nodes), the terminal `TEST HOOK GPUACCEPT_TEST_INJECT=...`, the summary "
        "and JUnit (`gpuaccept.test_hooks`) too; with `{}` both tests pass as judged, and still nothing is accepted",
        END_TO_END,
        ("tests/selftest/test_test_hooks.py::test_a_run_with_the_inject_hook_is_not_accepted",),
    ),
    Row(
        RULES,
        "no-hca",
        "a node without the HCAs its SKU declares",
        "the recorded healthy H200 without its sysfs trees: the probes read the loopback host's /sys, which has no "
        "InfiniBand (as the one-GPU H100 80GB HBM3 had none), while the packaged H200 declares 8 HCAs",
        "`test_infiniband[nodeN]` FAILED `ib_hca_count = 0`; `test_gdr_enablement[nodeN]` and `test_ib_counter_window` "
        "skip `nodeN has no compute HCA, so ...: its SKU H200 declares InfiniBand (ib_hca_count, ib_link_layer), which "
        "test_infiniband judges; a site file declares a node without it: skus.H200.limits.ib_hca_count: ...`; no test "
        "says `nothing was measured`",
        END_TO_END,
        (
            "tests/selftest/test_declared_absence.py::test_the_missing_hca_is_named",
            "tests/selftest/test_declared_absence.py::test_nothing_reads_nothing_was_measured",
        ),
    ),
    # ---- only a GPU can show --------------------------------------------------------------------------
    Row(
        GPU,
        "hog",
        "another process on a GPU (a hog)",
        "a torch loop on GPU 1 of the 2 x H200 SXM 141GB while the hardware tests ran (docs/measurements.md "
        "'2 x H200 SXM 141GB, 2026-11-23: the whole suite, five hardware runs, a hog'); a torch loop on one H100 80GB "
        "HBM3 under the node check ('1 x H100 80GB HBM3, 2026-11-23: calibrate as if unlisted, and the node check')",
        "`test_matmul`, `test_membw`, `test_hostbw`, `test_p2p`, `test_nvlink_errors_under_load` ERROR `GPU busy on "
        "node1: ... GPU 1 (00000000:00:07.0): pid 3708 python3`, GPU 0 measured and passed; the node check FAILED "
        "`gpu_foreign_processes GPU0 1703 python3`",
        GPU_RUN,
        ("tests/selftest/test_gpu_perf_judges.py::test_busy_gpu_is_an_error_naming_only_it",),
    ),
    Row(
        GPU,
        "wrong-bits",
        "a GPU computing wrong bits",
        "`GPUACCEPT_TEST_PERTURB_TRAINING=gpu=0,step=10` (one bf16 "
        "ulp on one weight of GPU 0) on an H200, 2026-11-23 (docs/measurements.md 'Training that tests the GPU')",
        "`test_finetune_agreement` FAILED `node1 GPU 0 (00000000:00:06.0): trajectory changed since ...` (first "
        "departs at step 10); GPU 1 agrees; the matmul checksum rule is proven on edited figures only",
        GPU_RUN,
        (
            "tests/selftest/test_training_agreement.py",
            "tests/selftest/test_gpu_perf_judges.py::test_checksum_mismatch_fails",
        ),
    ),
    Row(
        GPU,
        "foreign-device",
        "a task can open its neighbour's GPU, tasks share CPUs",
        "no device cgroups / `TaskPlugin=task/none` (the loopback dev cluster on a GPU host)",
        "`gpu_foreign_devices_openable`, `task_cpu_overlap_pairs` "
        "judged against the packaged 0 (FAILED) unless a site file declares the cluster so",
        GPU_RUN,
        ("docs/measurements.md '2 x H200 SXM 141GB, 2026-11-23: the whole suite, five hardware runs, a hog'",),
    ),
    Row(
        GPU,
        "slow-gpu",
        "a slow GPU / a straggler above the floor",
        "on GPUs, the whole suite on 4 x H200 SXM 141GB (benchmarks/slow_gpu_device.sh): a neighbour process "
        "streaming GPU 2's HBM and another keeping GPU 1's SMs busy (benchmarks/neighbour.py, no GPU setting "
        "touched); in CI one GPU's figure edited to 550 / to 15% under its siblings, and a fine-tune rank slowed by "
        "`GPUACCEPT_FAULT_SLOW_RANK=1:4@node2` (4 s after each step) in the suite on the loopback cluster",
        "GPUs 1 and 2 FAILED by their own figures (7B MFU 17.84 and 18.57% against 30, decode 20.33 and 20.34% MBU "
        "against 34.5; GPUs 0 and 3 passed at 40.0%), the node's DDP and FSDP not run, naming both GPUs and their "
        "rates, the benchmark's tests naming the other processes; 326 s, inside a healthy run's budget. On the "
        "loopback cluster: a launch stopped once the rank is behind its floor, that rank FAILED by the upper bound "
        "its progress proves, the others judged on their own figures",
        GPU_RUN,
        (
            "docs/measurements.md '4 x H200 SXM 141GB, 2026-11-27, later: the whole suite again, and a slow GPU'",
            "tests/selftest/test_gpu_perf_judges.py::test_slow_gpu_fails_with_its_name",
            "tests/selftest/test_gpu_perf_judges.py::test_straggler_above_floor_fails",
            "tests/selftest/test_training_progress.py::test_slow_rank_is_failed_by_its_progress_bound_and_the_others_judged",
            "tests/selftest/test_training_progress.py::test_hung_rank_is_named_as_a_hang_long_before_the_limit",
        ),
    ),
    Row(
        GPU,
        "nvlink-load-errors",
        "NVLink errors under load",
        "CRC flit or replay counts edited into the P2P copies' counters (the 30 s soak on 2 x H200 SXM 141GB counted "
        "none: docs/measurements.md '2 x H200 SXM 141GB, 2026-11-22: NVLink soak')",
        "FAILED naming the links the errors sat on",
        LOGIC,
        (
            "tests/selftest/test_gpu_perf_judges.py::test_p2p_nvlink_errors_under_load",
            "tests/selftest/test_gpu_perf_judges.py::test_nvlink_errors_name_the_links",
        ),
    ),
    # ---- NCCL, training, runs --------------------------------------------------------------------------
    Row(
        NCCL,
        "regression",
        "a figure worse than the last run",
        "`--baseline latest` with a 5x slower second run (an inner test's host memcpy, slowed on node2)",
        "FAILED, category regression, the upgrade story in the terminal; only node2 regresses",
        END_TO_END,
        (
            "tests/selftest/test_baseline.py::test_only_the_slow_node_regresses_on_slurm",
            "tests/selftest/test_baseline.py::test_slower_second_run_is_a_regression_unchanged_is_not",
        ),
    ),
    # ---- the fabric ------------------------------------------------------------------------------------
    Row(
        FABRIC,
        "socket-fallback",
        "NCCL fell back to TCP sockets (IB not found, `NCCL_IB_DISABLE`, wrong `NCCL_IB_HCA`)",
        "`NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1` on 2 x H200 SXM 141GB, 2026-11-23 (no HCA): NCCL's network "
        "path is `NET/Socket` (docs/measurements.md, the recorded logs in fixtures/nccl/)",
        "`test_nccl_transport` FAILED `node1 GPU 0: nccl_net_transport = Socket`, the same for node2 GPU 1; every "
        "compute HCA `nccl_net_hca_used = 0` (synthesised 8-HCA log)",
        GPU_RUN,
        (
            "tests/selftest/test_fabric_transport.py::test_recorded_socket_fallback_on_the_h200_host",
            "tests/selftest/test_fabric_transport.py::test_socket_fallback_fails_naming_the_transport_and_every_idle_hca",
        ),
    ),
    Row(
        FABRIC,
        "wrong-hca",
        "GPU sends through a NIC across the CPU",
        "synthesised NCCL log: GPU on mlx5_5 (affine: mlx5_3)",
        "FAILED `nccl_net_hca_affinity = mlx5_5 (affine: mlx5_3)`, the unused HCA `nccl_net_hca_used = 0`",
        LOGIC,
        ("tests/selftest/test_fabric_transport.py::test_gpu_on_the_wrong_hca_fails_naming_gpu_and_hca",),
    ),
    Row(
        FABRIC,
        "slow-rail",
        "slow rail (one HCA, cable or leaf)",
        "per-rail results edited below the floor",
        "FAILED naming rail (HCA) and node after the second pass (the loopback run judges 2 real gloo rails, healthy)",
        LOGIC,
        ("tests/selftest/test_fabric_rails.py::test_failing_rail_bisected_to_the_node",),
    ),
    Row(
        FABRIC,
        "slow-hca",
        "a slow HCA on one node",
        "pass/fail per perftest pair given to the second pass "
        "(perftest stand-ins on the loopback cluster took 3 minutes for 6 x 8 HCAs: not in CI)",
        "FAILED naming node and HCA; its partners cleared",
        LOGIC,
        ("tests/selftest/test_fabric_perftest.py::test_second_pass_convicts_the_bad_hca_not_its_partners",),
    ),
    Row(
        FABRIC,
        "slow-fabric",
        "uniformly slow fabric",
        "busbw edited against the sysfs line rate",
        "FAILED `nccl_busbw_fabric_pct` < 82 and the absolute multi-node floor missed",
        LOGIC,
        ("tests/selftest/test_fabric_transport.py::test_fabric_line_rate_from_sysfs_judges_a_uniformly_slow_fabric",),
    ),
    Row(
        FABRIC,
        "mnnvl-missing",
        "NCCL init without the MNNVL line (an NVLink domain's collective not carried by MNNVL)",
        "a GB200 rank's NCCL init lines with the communicator line's `MNNVL 1` taken out (NCCL's format strings); "
        "NVIDIA/nccl#1769's published GB200 fabric lines; 'NVLS multicast support is available' alone",
        "FAILED `nccl_domain_transport` naming node and rank: the transport seen (no communicator line with MNNVL, "
        "NVLS multicast available: hardware only) against MNNVL",
        LOGIC,
        (
            "tests/selftest/test_mnnvl.py::test_the_same_log_without_the_mnnvl_line_fails_naming_node_and_rank",
            "tests/selftest/test_mnnvl.py::test_nvls_multicast_available_alone_is_not_proof",
            "tests/selftest/test_mnnvl.py::test_published_gb200_fabric_lines_without_the_communicator_line_are_not_proof",
        ),
    ),
)
