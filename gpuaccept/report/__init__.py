"""What a customer reads: the Allure report of an acceptance run.

``plugin`` (labels, attachments, environment.properties, categories.json, the baseline section of the
terminal summary), ``labels`` (area/topic/severity from the category markers), ``attach`` and
``plots`` (helpers for tests that attach their own PNG/JSON/tables), ``allure_files`` (the files
Allure reads beside the results) and ``html`` (``gpuaccept-report``: the HTML, single-file option).
"""
