"""Every area's judging, one module per area, the one home of its checks: tests ask, probes measure, these
modules judge. The acceptance tests, the node check (``nodecheck.gate``) and, through the tests it runs,
the calibration hand them what a probe measured; they record checks on the judge and return, never
dispatching, skipping or raising a verdict. Which judges apply to a node is decided here too (an
``*_absent`` function says why a test does not apply; the test only skips with that reason).

GPU health (``gpu_health``: NVML health, the GPU count, Xids, processes outside every job), compute
(``compute``), memory and host links (``memory``), the gpubench step they share (``bench``), NVLink
(``nvlink``), InfiniBand (``infiniband``: ports, counters since boot and over the fabric tests, which nodes
the SKU holds to it), the fabric between nodes (``fabric``: GPUDirect, transport, rails, RDMA pairs), NCCL
(``nccl``, ``nccl_lines``), training (``training``, ``launch_time``, and ``trajectory``: the fleet agreement of
training curves) and serving (``inference``), Slurm (``slurm``), the node's environment (``environment``),
hygiene and node state (``hygiene``) and the shared filesystem (``storage``).

A judge imports downward only: ``contracts``, the judging core, the results and thresholds, and the area's
node-side parsers and planners (``nccl``, ``fabric``, ``training``, ``inference``); never a probe, never
dispatch.
"""
