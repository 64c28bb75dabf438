"""Progress output that reads right in a terminal and in a log: whole lines off a terminal, errors on their own line."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np

from pretrainkit.shards import write_shards

ROOT = Path(__file__).resolve().parents[2]


def _ptk(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pretrainkit.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        timeout=900,
    )  # a hang bound


def test_off_a_terminal_a_bar_is_whole_lines(tmp_path: Path) -> None:
    docs = [np.arange(i % 50 + 5, dtype=np.uint16) for i in range(400)]
    write_shards(
        docs, tmp_path / "s", vocab_size=257, eos_id=256, tokenizer_sha256="b" * 64, shard_tokens=2000, batch_tokens=500
    )
    proc = _ptk("shards", "verify", str(tmp_path / "s"), PTK_PROGRESS_SECONDS="0")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "\r" not in proc.stderr
    shards = len(json.loads((tmp_path / "s" / "manifest.json").read_text())["shards"])
    assert shards > 2
    assert [line for line in lines if line.startswith("verify: ")][-1].startswith(
        f"verify: {shards}/{shards} shard (100%)"
    )
    # With the default interval a run this short prints no progress line at all.
    quiet = _ptk("shards", "verify", str(tmp_path / "s"))
    assert quiet.returncode == 0 and "verify:" not in quiet.stderr


FAILING_COMMAND = """
import sys
import termios
from pretrainkit import cli
from pretrainkit.errors import UserError
from pretrainkit.progress import progress_bar

def fail(args):
    bar = progress_bar(total=10, desc="work", unit="doc")
    bar.update(3)
    raise UserError("corpus.jsonl: line 4: not valid JSON")

def register(sub):
    sub.add_parser("fail").set_defaults(func=fail)

cli.COMMAND_MODULES += (__name__,)
sys.exit(cli.main(["fail"]))
"""


def test_on_a_terminal_an_error_never_lands_on_a_bar_line() -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: stderr is the pseudo-terminal, as for a user at a shell
        os.environ["PYTHONPATH"] = str(ROOT)
        os.execv(sys.executable, [sys.executable, "-c", FAILING_COMMAND])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode()
    assert os.waitstatus_to_exitcode(status) == 2
    assert "work:  30%" in text  # a real tqdm bar was drawn
    line = next(ln for ln in re.split(r"\r?\n", text) if "ptk: error:" in ln)
    assert line.split("\r")[-1] == "ptk: error: corpus.jsonl: line 4: not valid JSON"
    assert line == line.split("\r")[-1], f"the error shares a line with a bar: {line!r}"
