"""Imported in multiprocessing's forkserver only, which `pretrainkit.processes.start_context` names it
to preload; no other module imports it, since importing it is what it does.

The server ignores SIGTERM, as multiprocessing's resource tracker does: a SIGTERM to the process group
(Slurm's stop, a test's) that ended the server in the middle of forking a worker left that worker
waiting for its start-up data, which never came, and it printed a traceback into the stopped command's
output. The server ends with the process it serves all the same (its pipe from that process closes).
Its children inherit the ignore until their own code sets SIGTERM (the local runner's workers restore
the default first; a DataLoader's workers install their own handler).
"""

import signal

signal.signal(signal.SIGTERM, signal.SIG_IGN)
