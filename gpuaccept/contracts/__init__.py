"""The contracts between gpuaccept's roles: what a probe emits and every other role reads.

Plain types and pure functions only, importing nothing of gpuaccept but the leaves (``units``,
``errors``), so the node side (``probes``, and the area code they run: ``nccl``, ``fabric``,
``training``), dispatch and the judging side (``judging``, ``verdicts``) all import them
downward and never each other: ``payloads`` (the typed readings a probe emits), ``records`` (one rank's
sentinel line, ``RankRecord``), ``judge`` (what an area judge needs of the test's judge, ``JudgeLike``,
and the GPU label), ``categories`` (the six words a test that did not pass is sorted by),
``nccl_formulas`` (nccl-tests' size and bandwidth definitions), ``nccl_sweep`` (the sweep sizes and
byte format both the probe and the judges compute, and the per-group table of a probe's rows),
``ib`` (the InfiniBand sysfs spellings of a port's state and rate).
"""
