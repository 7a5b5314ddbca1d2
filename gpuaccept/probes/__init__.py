"""Probes: plain modules run on a node as ``python -m gpuaccept.probes.<name>``.

Each measures and prints one sentinel JSON line per rank (see ``_protocol``); none asserts anything.
Thresholds and verdicts belong to the tests, dispatch to the plugin.
"""
