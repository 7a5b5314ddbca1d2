"""What a customer reads: the Allure report and the acceptance summary of a run.

``plugin`` (a listener on gpuaccept's hooks: labels, attachments, environment.properties,
categories.json, the metrics and baseline CSVs, the summary page, the baseline section of the terminal
summary), ``labels`` (area/topic/severity from the table of areas), ``identity`` (what was tested with
which stack), ``checks`` (a test's checks for Allure and JUnit), ``charts`` (every picture), ``attach``
(helpers for tests that attach their own PNG/text/tables), ``allure_files`` (the files Allure reads
beside the results), ``summary``/``summary_model`` (``reports/summary.html``) and ``html``
(``gpuaccept-report``: the HTML, single-file option).
"""
