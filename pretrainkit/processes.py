"""Child processes that never outlive the command that started them.

    pool = multiprocessing.Pool(4, initializer=die_with_parent, initargs=(os.getpid(),))  # dataprep
    subprocess.run(torchrun_command, preexec_fn=functools.partial(die_with_parent, os.getpid()))

A parent killed with SIGKILL cannot stop its children; without this they would keep running
(re-parented, holding memory and writing files) beside the rerun that resumes the same output.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere).

    Call it in the child, right after it starts (a pool initializer, a `preexec_fn`), with `parent` the
    pid the parent read of itself before starting the child: a parent killed between the fork and this
    call would otherwise go unnoticed, the child already re-parented when it asks (None: the parent
    seen now, for a child that cannot know). Linux ties the request to the thread that started the
    child, so start children from a thread that lives as long as they should (the main thread)."""
    if not sys.platform.startswith("linux"):
        return
    if parent is None:
        parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
