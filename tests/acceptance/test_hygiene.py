"""Node hygiene: /dev/shm, open-file and locked-memory limits as a job step sees them."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.acceptance, pytest.mark.hygiene]


def test_node_limits(node, cluster, limits):
    data = cluster.run("hygiene", nodes=[node]).one().data
    limits.check("dev_shm_gib", data["dev_shm_gib"], node=node)
    limits.check("nofile", data["nofile"], node=node)
    limits.check("memlock_kib", data["memlock_kib"], node=node)
    limits.check("swap_total_gib", data["swap_total_gib"], node=node)
    limits.check("hugepages_total", data["hugepages_total"], node=node, page_kib=data["hugepage_size_kib"])
    limits.verify()
