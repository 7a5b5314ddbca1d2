"""A pytest plugin for the fleet benchmark: the per-node xdist groups, applied before xdist reads them.

gpuaccept's ``pytest_collection_modifyitems`` marks every node-local test ``xdist_group("node-<node>")``
so that ``--dist loadgroup`` keeps a node's tests on one worker. xdist's worker turns the marks into
the ``@group`` suffix it schedules by in its own ``pytest_collection_modifyitems``, and pluggy calls
the later-registered worker hook first: the marks arrive too late, the ids carry no suffix, and a
node's tests spread over every worker (measured with ``benchmarks/step_timing.py``: each worker then
takes the node's fingerprint again, a torch import on a GPU host). This plugin adds the same marks
with ``tryfirst`` so the fleet benchmark can measure the suite as it runs once the plugin's hook is
ordered first (``@pytest.hookimpl(tryfirst=True)`` on gpuaccept's own hook does the same).

    PYTHONPATH=benchmarks pytest -p xdist_groups -n 4 --dist loadgroup ...
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "node" in callspec.params:
            item.add_marker(pytest.mark.xdist_group(f"node-{callspec.params['node']}"))
        elif item.get_closest_marker("multinode"):
            item.add_marker(pytest.mark.xdist_group("all-nodes"))
