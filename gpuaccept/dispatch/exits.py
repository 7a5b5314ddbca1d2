"""How a step ended, in words: its exit status or signal, and under srun the task that ended it.

srun's own exit status is the highest of its tasks' (srun(1), "RETURN VALUE"), and with ``--kill-on-bad-exit``
the first task to exit non-zero makes srun terminate the others: a rank that exits 3 is then reported as 143,
the SIGTERM of the rank srun stopped. srun names the task it saw end badly on stderr
(``srun: error: node1: task 0: Exited with exit code 3``), so the words carry that line's node, task and code:
which rank broke, not which one was stopped because of it.
"""

from __future__ import annotations

import re
import signal

__all__ = ["describe_exit"]

#: srun's line for a task that ended with a non-zero status (the first such line is the one that set off the rest)
_SRUN_TASK_EXIT = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): Exited with exit code (\d+)")


def describe_exit(returncode: int, stderr: str = "") -> str:
    """``exit status N`` or ``killed by signal NAME``; where srun's stderr names a task that exited with another
    status first, that task, its node and its status too."""
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    first = _SRUN_TASK_EXIT.search(stderr)
    if first is None or int(first[3]) == returncode:
        return f"exit status {returncode}"
    node, tasks, code = first.groups()
    return (
        f"exit status {returncode}: task {tasks} on {node} exited with exit status {code} first "
        "(srun's status is its tasks' highest; it terminated the others)"
    )
