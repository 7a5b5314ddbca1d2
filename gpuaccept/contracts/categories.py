"""The six words a customer's report sorts a test that did not pass by (``gpuaccept.judging.categories``
decides which one a test gets, and says what each means). The words live here so the run record and
the session verdict (``results``, ``judging.verdict``) and the report read them without importing
the decision.
"""

from __future__ import annotations

__all__ = ["CATEGORIES", "SUITE_ERROR"]

#: an exception of the suite's own ended the test: the suite could not judge
SUITE_ERROR = "suite error"
CATEGORIES = (SUITE_ERROR, "could not measure", "regression", "hardware fault", "drift", "threshold miss")
