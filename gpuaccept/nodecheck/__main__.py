"""``python -m gpuaccept.nodecheck``: the same as the ``gpuaccept-node-check`` console script."""

from gpuaccept.nodecheck.cli import entry

entry()
