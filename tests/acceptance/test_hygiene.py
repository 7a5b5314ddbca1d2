"""Node hygiene: /dev/shm, open-file and locked-memory limits as a job step sees them."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.acceptance, pytest.mark.hygiene]


@pytest.mark.judges("dev_shm_gib", "nofile", "memlock_kib")
def test_node_limits(node, cluster, judge):
    """/dev/shm size and the open-file limit everywhere; locked memory where the SKU needs RDMA pinning."""
    data = cluster.run("hygiene", nodes=[node]).one().data
    judge.check("dev_shm_gib", data["dev_shm_gib"], node=node)
    judge.check("nofile", data["nofile"], node=node)
    judge.check("memlock_kib", data["memlock_kib"], node=node)
    judge.info("swap_total_gib", data["swap_total_gib"], node=node)
    judge.info("hugepages_total", data["hugepages_total"], node=node, page_kib=data["hugepage_size_kib"])
