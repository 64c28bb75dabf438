"""Child processes that never outlive the command that started them.

    pool = multiprocessing.Pool(4, initializer=die_with_parent)       # dataprep's local workers
    subprocess.run(torchrun_command, preexec_fn=die_with_parent)     # ptk train --nproc N

A parent killed with SIGKILL cannot stop its children; without this they would keep running
(re-parented, holding memory and writing files) beside the rerun that resumes the same output.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere).

    Call it in the child, right after it starts (a pool initializer, a `preexec_fn`). Linux ties the
    request to the thread that started the child, so start children from a thread that lives as long
    as they should (the main thread)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
