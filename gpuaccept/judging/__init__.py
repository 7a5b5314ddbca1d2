"""The judging core: every verdict, every check on the record (see ``judge.py``).

``Judge`` (the ``judge`` fixture) judges one test's measurements against thresholds, expectations,
the baseline run and the straggler rule; ``outcome`` ends a test from its checks (the plugin calls
it); ``baseline`` the comparison with an earlier run; ``fields`` the fingerprint catalogue that drift
and "what changed" read; ``trajectory`` how two training curves compare (the fleet-agreement judge that
records their checks is ``verdicts.trajectory``); ``categories`` why a test did not pass. No domain's
judging lives here: NCCL's group and blame rules are in ``verdicts/nccl*.py``.
"""
