r"""One `python -m pretrainkit.train` process whose hashing of one checkpoint's files is held forever or fails: a run to
kill, or to watch fail, while that checkpoint is finalized in the background. Launched by the tests:

    python -m pretrainkit.train.torchrun --standalone --nproc_per_node 2 \
        tests/train/checkpoint/held_hashing_worker.py hold 8 any CONFIG
    python -m pretrainkit.train.torchrun --standalone --nproc_per_node 2 \
        tests/train/checkpoint/held_hashing_worker.py fail 8 1 CONFIG

`hold STEP RANK`: the processes of rank RANK (`any`: every process) block as they start hashing a file of
checkpoint STEP, after writing `held-rank<r>` beside CONFIG. `fail STEP RANK`: that process's hashing of
checkpoint STEP raises an input/output error instead.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pretrainkit.train.checkpoint.checkpoints as checkpoints  # noqa: E402
from pretrainkit.train.__main__ import main  # noqa: E402
from pretrainkit.train.parallel.distributed import exit_process  # noqa: E402
from pretrainkit.train.rundir.names import TMP_PREFIX, checkpoint_name  # noqa: E402


def patch(mode: str, step: int, rank: str, config: Path) -> None:
    real = checkpoints.sha256_file
    me = os.environ["RANK"]

    def sha256_file(path: str | os.PathLike) -> str:
        if Path(path).parent.name == f"{TMP_PREFIX}{checkpoint_name(step)}" and rank in ("any", me):
            if mode == "fail":
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
            (config.parent / f"held-rank{me}").write_text(str(path))
            threading.Event().wait()
        return real(path)

    checkpoints.sha256_file = sha256_file


if __name__ == "__main__":
    mode, step, rank, config, *rest = sys.argv[1:]
    patch(mode, int(step), rank, Path(config))
    exit_process(main([config, *rest]))  # as `python -m pretrainkit.train` ends
