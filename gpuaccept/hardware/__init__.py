"""Each hardware area's judging, in one module per area: GPU health (``health``, ``xid``), compute
(``compute``), memory and host links (``memory``), NVLink (``nvlink``), InfiniBand ports (``ib``),
hygiene (``hygiene``) and the node's environment (``environment``).

The probes (``gpuaccept.probes.*``) measure on the node and pass raw readings on; these modules run on
the login node: the acceptance tests and the node check (``nodecheck.verdicts``) hand them what a probe
measured, and they turn it into checks recorded on ``judge`` (the test's ``Judge``). Nothing here runs a
subprocess or imports pytest, so the selftests feed recorded fixtures through exactly this code.
"""
