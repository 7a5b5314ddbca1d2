"""What this process runs in: the image's marker file, the Python it found, the container runtime's traces.

The proof that a step ran inside the image the launcher asked for: every probe's result line carries
``where()`` (``_protocol.emit``), so the run record shows, step by step and node by node, the image and
the interpreter that measured. Run by hand (``python3 -m gpuaccept.probes.container``) it prints the
same as one result line; the launcher runs it on every node before the first test to learn that the
image starts and holds the suite (``gpuaccept.dispatch.container``).

The reading itself lives in ``_where.py`` (re-exported here), which ``_protocol`` imports: this probe
imports ``_protocol`` to emit, so the two would otherwise import each other.
"""

from __future__ import annotations

from gpuaccept.probes._protocol import emit
from gpuaccept.probes._where import where

__all__ = ["where"]


def main() -> None:
    emit({"where": where()}, probe="container")


if __name__ == "__main__":
    main()
