"""Where the compiled (numba) kernels are cached, and whether any of a package's is yet.

    use_cache_dir()     # a stage package's __init__, before numba is imported
    kernels_cached("pretrainkit.dataprep.dedup")    # dedup's: False on a machine's first run (10-55 s compiling)
    kernels_cached("pretrainkit.dataprep.filter")   # the filters'

Every kernel is compiled with `cache=True`: numba keeps its machine code beside the module
(`__pycache__`), or in `NUMBA_CACHE_DIR` where that is set. Where this package's folder is not
writable (an installed site-packages of another user, a read-only image), `use_cache_dir` sets
`NUMBA_CACHE_DIR` to the user's cache, `$XDG_CACHE_HOME/pretrainkit/numba` (default
`~/.cache/pretrainkit/numba`), unless it is set already. It runs when the package is imported, so
every process of a run (local workers, which also inherit the variable, and Ray workers, which
import the package) uses the same cache.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Mapping
from pathlib import Path

CACHE_ENV = "NUMBA_CACHE_DIR"


def cache_dir(package_dir: Path, environ: Mapping[str, str]) -> str | None:
    """The `NUMBA_CACHE_DIR` to set for kernels of `package_dir`: None where the variable is set or
    numba can write beside the modules."""
    if environ.get(CACHE_ENV) or os.access(package_dir, os.W_OK):
        return None
    base = environ.get("XDG_CACHE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pretrainkit", "numba")


def use_cache_dir() -> None:
    chosen = cache_dir(Path(__file__).resolve().parent, os.environ)
    if chosen:
        os.environ[CACHE_ENV] = chosen


def kernels_cached(package_name: str) -> bool:
    """Whether any kernel of the package has machine code in the cache for this code (its index
    exists and matches the module's source): a few small reads. Only a first run (or one after an
    upgrade) has none."""
    from numba.core.dispatcher import Dispatcher

    package = importlib.import_module(package_name)
    for info in pkgutil.iter_modules(package.__path__):  # every module, so a new kernel's is never left out
        module = importlib.import_module(f"{package_name}.{info.name}")
        for kernel in vars(module).values():
            # numba's own cache index (`_load_index`: empty where missing or stale); its layout is numba's
            if isinstance(kernel, Dispatcher) and kernel._cache._cache_file._load_index():
                return True
    return False
