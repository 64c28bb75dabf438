"""Child processes that start safely from any parent and never outlive the command that started them.

    ctx = start_context(preload=[__name__])                # "fork" only from a single-threaded process
    subprocess.run(torchrun_command, preexec_fn=functools.partial(die_with_parent, os.getpid()))
    take_environment(environment)                          # in a child a forkserver started: the parent's

A fork copies the locks that the parent's other threads hold at that moment (Ray's gRPC threads,
tokenizers' Rust pool, a prefetch thread), and a child that then takes one hangs or crashes: so a
process with threads starts its children from multiprocessing's forkserver, a process started once
by fork + exec that has no threads of its own, whose environment is that of the moment it started.
A parent killed with SIGKILL cannot stop its children; without `die_with_parent` (or
`die_when_hung_up`, for a child whose parent is the forkserver) they would keep running
(re-parented, holding memory and writing files) beside the rerun that resumes the same output.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import select
import signal
import sys
import threading
from collections.abc import Mapping, Sequence

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# What keeps an import from starting a native thread: numpy's OpenBLAS starts a pool of one thread per
# core, Arrow's bundled jemalloc a background thread that returns freed pages (Arrow allocates with
# mimalloc here; jemalloc purges on its own calls without it).
QUIET_IMPORTS = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
TASKS = "/proc/self/task"  # one entry per thread of this process, native ones included (Linux)


def thread_count() -> int:
    """This process's threads, native ones included (a Rust or C++ library's pool, Ray's gRPC threads),
    which `threading.active_count()` does not see; that count where there is no /proc."""
    try:
        return len(os.listdir(TASKS))
    except FileNotFoundError:
        return threading.active_count()


def start_method() -> str:
    """How this process should start a child now: "fork" where it is single-threaded on Linux (the
    cheapest start), "forkserver" where it has threads, "spawn" elsewhere (macOS: fork is unsafe there)."""
    if not sys.platform.startswith("linux"):
        return "spawn"
    return "fork" if thread_count() == 1 else "forkserver"


def start_context(preload: Sequence[str] = ()) -> multiprocessing.context.BaseContext:
    """The multiprocessing context to start children from this process now (`start_method`). For the
    forkserver, the server is running when this returns: started here if it is not yet (by fork +
    exec, safe from any thread), with the modules `preload` imported in it, so that every child it
    forks has them without importing them itself (one server serves the whole process: the list of
    the first start holds, and it replaces any list set before)."""
    method = start_method()
    if method == "forkserver":
        # "__main__": the default list; the setup module makes the server ignore SIGTERM (its docstring).
        multiprocessing.set_forkserver_preload(["__main__", "pretrainkit.forkserver_setup", *preload])
        multiprocessing.forkserver.ensure_running()
    return multiprocessing.get_context(method)


def quiet_imports() -> None:
    """Keep the imports to come from starting threads (`QUIET_IMPORTS`, where the user has not set them):
    for a command that starts workers, so that it is still single-threaded then and forks them instead
    of starting a forkserver (half a second a command; seconds on a loaded machine). The workers inherit
    the settings, which suit them: they are the parallelism, one process per core."""
    for name, value in QUIET_IMPORTS.items():
        os.environ.setdefault(name, value)


def take_environment(environment: Mapping[str, str]) -> None:
    """In a child a forkserver started: `environment`, the starting process's (the server's own is that
    of the moment it started; a bucket's credentials may have been set since). Call it first, before
    the child imports what reads the environment."""
    os.environ.clear()
    os.environ.update(environment)


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


def die_when_hung_up(fd: int) -> None:
    """SIGKILL this process, as `die_with_parent` would, once the other end of the socket `fd` has closed
    (Linux; no-op elsewhere): for a child that a forkserver forked, whose parent is the server and not
    the process it serves, and which holds a socket to that process that only its death closes. A
    daemon thread waits for the hang-up (not for data: what arrives is left to the reader)."""
    if not sys.platform.startswith("linux"):
        return
    poller = select.poll()
    poller.register(fd, select.POLLRDHUP)

    def wait() -> None:
        poller.poll()
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait, name="die-when-hung-up", daemon=True).start()
