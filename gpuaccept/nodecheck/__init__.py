"""The node check: seconds of reading on one node, judged like the suite, for Slurm's gate.

``gpuaccept-node-check`` (``python -m gpuaccept.nodecheck``) runs on the node itself as Slurm's
HealthCheckProgram, Prolog or Epilog, without pytest collection: the probes' reading code runs in
child processes a watchdog can abandon (``watchdog``), the readings are judged by the suite's judging
core against the same thresholds (``verdicts``), and a failing node is drained with a reason that names
the check, the GPU and the value (``gpuaccept.fleet.node``). docs/gate.md says how to install it.
"""
