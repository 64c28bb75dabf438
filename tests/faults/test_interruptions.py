"""Every long-running command killed (kill -9) or stopped by SIGTERM at random moments, then run again:
the rerun gives what an undisturbed run gives; a SIGTERM is answered by one line and exit status 143,
and no worker of the command outlives it.
And every command that holds its output folder, started while another run holds it: refused at once
in one line naming the holder, the folder untouched.

A SIGTERM's moment counts from when the command handles SIGTERM: one that comes while the interpreter
starts ends it by the default action (status -15, nothing begun, nothing to say), which no code of
ptk can change. The moments are drawn from PTK_FAULT_SEED (default 0), printed in a failure: another seed attacks
other moments (`PTK_FAULT_SEED=7 pytest tests/faults`).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.fault_commands import (
    COMMANDS,
    ROOT,
    Command,
    contents,
    error_line,
    output_of,
    ptk_command,
    ptk_env,
    run_ptk,
)
from fixtures.signals import catches_sigterm

SEED = os.environ.get("PTK_FAULT_SEED", "0")
KILLS = 2  # moments per command


def start(argv: list[str]) -> subprocess.Popen:
    """`ptk ARGV` in a session of its own, so that a signal to its group reaches its workers too."""
    return subprocess.Popen(
        ptk_command(argv),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ptk_env(),
        start_new_session=True,
    )


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.resumable], ids=str)
def test_kill_9_at_random_moments_then_a_rerun_gives_the_same(
    command: Command, workspace, reference_run, tmp_path: Path
) -> None:
    reference, seconds = reference_run(command)
    rng = random.Random(f"{SEED}-{command}")
    out = output_of(command, tmp_path / "killed")
    for attempt in range(KILLS):
        moment = rng.uniform(0.05, 1.0) * seconds
        victim = start(command.argv(workspace, out))
        time.sleep(moment)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.communicate()
        where = f"PTK_FAULT_SEED={SEED}: kill {attempt + 1} at {moment:.2f} s of {seconds:.2f} s"
        rerun = run_ptk(command.argv(workspace, out))
        assert rerun.returncode == 0, (where, rerun.stderr[-3000:])
        assert contents(command, out) == contents(command, reference), where


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.resumable], ids=str)
def test_sigterm_at_random_moments_is_one_line_143_and_a_rerun_gives_the_same(
    command: Command, workspace, reference_run, tmp_path: Path
) -> None:
    """Sent to the command alone (what Kubernetes does) and to its whole process group (Slurm)."""
    reference, seconds = reference_run(command)
    rng = random.Random(f"{SEED}-{command}-term")
    out = output_of(command, tmp_path / "stopped")
    for send in (os.kill, os.killpg):
        moment = rng.uniform(0.05, 1.0) * seconds
        victim = start(command.argv(workspace, out))
        if catches_sigterm(victim.pid):
            time.sleep(moment)
            send(victim.pid, signal.SIGTERM)
        _, err = victim.communicate(timeout=600)
        where = f"PTK_FAULT_SEED={SEED}: SIGTERM ({send.__name__}) at {moment:.2f} s of {seconds:.2f} s"
        assert "Traceback" not in err, (where, err[-3000:])
        assert not outliving(victim.pid), (where, "a worker outlived the stopped command", outliving(victim.pid))
        if victim.returncode != 0:  # else it had finished before the signal came
            assert victim.returncode == 143, (where, err[-3000:])
            last = err.strip().splitlines()[-1]
            assert "stopped by SIGTERM" in last, (where, last)
        rerun = run_ptk(command.argv(workspace, out))
        assert rerun.returncode == 0, (where, rerun.stderr[-3000:])
        assert contents(command, out) == contents(command, reference), where


def outliving(group: int, grace: float = 2.0) -> list[int]:
    """The processes of process group `group` still alive `grace` seconds after its leader ended: a
    worker that outlived its command (workers die with it; the kernel's signal may take a moment)."""
    deadline = time.monotonic() + grace
    while True:
        alive = []
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{name}/stat") as f:
                    state, _, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue
            if int(pgrp) == group and state != "Z":
                alive.append(int(name))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


HOLDING = [c for c in COMMANDS if c.folder_kind]
HOLDER = """
import sys, time
from pretrainkit import output_folders
with output_folders.output_folder(sys.argv[1], getattr(output_folders, sys.argv[2])):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("command", HOLDING, ids=str)
def test_a_second_run_on_a_held_folder_is_refused_at_once(command: Command, workspace, tmp_path: Path) -> None:
    out = output_of(command, tmp_path)
    holder = hold(out, command)
    try:
        assert holder.stdout.readline() == "held\n"
        before = sorted(p.name for p in out.iterdir())
        second = run_ptk(command.argv(workspace, out))
        assert second.returncode == 2
        line = error_line(second.stderr)
        assert f"{out} is in use by pid {holder.pid} (host " in line, line
        assert sorted(p.name for p in out.iterdir()) == before
    finally:
        holder.kill()
        holder.wait()
    # the lock went with its killed holder: the next process takes it at once (through the same
    # output_folder the command enters, without running the whole command again)
    successor = hold(out, command)
    try:
        assert successor.stdout.readline() == "held\n"
    finally:
        successor.kill()
        successor.wait()


def hold(out: Path, command: Command) -> subprocess.Popen:
    """A process that holds `out` as `command`'s kind of output folder until it is killed."""
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out), command.folder_kind],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=ptk_env(),
    )
