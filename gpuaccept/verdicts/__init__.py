"""The judging of the areas whose node-side code lives in its own package: one module per area, the
area's one home of its checks. The tests (and the node check) hand it what a probe measured; it
records checks on the test's judge and returns, never dispatching, skipping or raising a verdict.

``nccl`` (every NCCL check, the groups of a multi-node scale, the second pass's blame; ``nccl_lines``
its sweep table and metric names), ``fabric`` (GPUDirect, transport, rails, perftest pairs and the HCA
blame, IB counter windows), ``training`` (every fine-tune's judging), ``slurm`` (the scheduler's own
checks). The hardware areas' judges are ``gpuaccept.hardware``.

A judge imports downward only: ``contracts``, the judging core, and the area's node-side parsers and
planners (``nccl``, ``fabric``, ``training``); never a probe, never dispatch.
"""
