"""Inner-run plugin (``-p tests.selftest._inject_after``): the injected readings change during the run.

When the test named by ``GPUACCEPT_TEST_INJECT_AFTER_TEST`` is called (its fixtures, such as the IB
counter window's first reading, already ran), the test seam's file (``GPUACCEPT_TEST_INJECT``) is
replaced by ``GPUACCEPT_TEST_INJECT_AFTER``: a link flaps or a counter resets between the two readings,
as it would on a node while the suite runs. Only the selftests load it.
"""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    after = os.environ.get("GPUACCEPT_TEST_INJECT_AFTER")
    if after and item.name == os.environ.get("GPUACCEPT_TEST_INJECT_AFTER_TEST"):
        shutil.copyfile(after, os.environ["GPUACCEPT_TEST_INJECT"])
