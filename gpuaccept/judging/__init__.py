"""The judging core: every verdict, every check on the record (see ``judge.py``).

``Judge`` (the ``judge`` fixture) judges one test's measurements against thresholds, expectations,
the baseline run and the straggler rule; ``groups`` holds the multi-node scale, group and pair rules;
``baseline`` the comparison with an earlier run; ``fields`` the fingerprint catalogue that drift and
"what changed" read; ``categories`` why a test did not pass.
"""

from gpuaccept.judging.judge import Judge, judge_value, no_limit_message

__all__ = ["Judge", "judge_value", "no_limit_message"]
