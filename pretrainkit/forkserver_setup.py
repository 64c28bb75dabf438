"""Imported in multiprocessing's forkserver only, which `pretrainkit.processes.start_context` names it
to preload; no other module imports it, since importing it is what it does.

The server ignores SIGTERM, as multiprocessing's resource tracker does: a SIGTERM to the process group
(Slurm's stop, a test's) that ended the server in the middle of forking a worker left that worker
waiting for its start-up data, which never came, and it printed a traceback into the stopped command's
output. The server ends with the process it serves all the same (its pipe from that process closes).
Its children inherit the ignore until their own code sets SIGTERM (the local runner's workers restore
the default first; a DataLoader's workers install their own handler).

A child whose start-up data never comes because the process that asked for it stopped first (a SIGTERM
or Ctrl-C raised in that process's `Process.start()`, which blocking the signal there does not prevent
once it has threads: another thread takes it and the main thread runs the handler; a SIGKILL) exits
with status 1 and says nothing: nobody waits for it, and multiprocessing's EOFError traceback went into
the stopped command's output.
"""

import multiprocessing.spawn
import signal
from typing import Any

signal.signal(signal.SIGTERM, signal.SIG_IGN)

_spawn_main = multiprocessing.spawn._main


def _main_unless_orphaned(fd: int, parent_sentinel: Any) -> int:
    try:
        return _spawn_main(fd, parent_sentinel)
    except EOFError:  # only reading the start-up data raises it: the child's own errors end in _bootstrap
        return 1


# The server's fork calls this attribute for every child it starts (multiprocessing/forkserver.py).
multiprocessing.spawn._main = _main_unless_orphaned
