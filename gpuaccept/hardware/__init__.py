"""Pure parsing and judging helpers for the GPU, interconnect and bandwidth tests.

The probes (``gpuaccept.probes.*``) measure on the node and pass raw readings on; these modules run
on the login node inside the tests: they parse those readings (sysfs strings, kernel-log lines, NVML
bitmasks), turn them into metrics judged by ``judge`` (the test's ``Judge``) and decide between a
failure (the hardware missed) and an error (we could not measure, or the GPU was busy). Nothing here
runs a subprocess or imports pytest, so the selftests feed recorded fixtures through exactly the code
the acceptance tests use.
"""
