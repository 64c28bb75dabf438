"""Every command that writes, onto a full disk and into a read-only folder (real tmpfs mounts in a
private namespace): one line naming the folder, no temporaries left, and on the full disk a rerun
with room that gives what an undisturbed run gives."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from fixtures.fault_commands import COMMANDS, Command, contents, error_line, output_of, ptk_command, ptk_env, run_ptk
from fixtures.namespaces import in_namespace
from pretrainkit.files import TMP_MARK

WRITERS = [c for c in COMMANDS if c.writes]
# Files of the user's beside the output that look like temporaries (another program's among them): a failed
# run removes only the temporaries it made.
USER_FILES = ("notes/draft.tmp-v2.txt", "notes/x.tmp-123", "draft.tmp-v2.txt")


def shell(argv: list[str]) -> str:
    return shlex.join(ptk_command(argv))


def user_files_listed(where: Path, when: str) -> str:
    """Shell lines printing `<when> <file>: keep me` for each of USER_FILES still under `where`."""
    return "".join(f"cat {where / f} | sed 's|^|{when} {f}: |'; " for f in USER_FILES)


@pytest.mark.parametrize("command", WRITERS, ids=str)
def test_a_full_disk_is_one_line_and_a_rerun_with_room_gives_the_same(
    command: Command, workspace, tmp_path: Path
) -> None:
    reference = output_of(command, tmp_path / "reference")
    done = run_ptk(command.argv(workspace, reference))
    assert done.returncode == 0, done.stderr[-3000:]
    needed_kb = sum(len(b) for b in contents(command, reference).values()) // 1024
    pages_kb = max(4, needed_kb // 3 // 4 * 4)  # a third of what it writes: it runs out part way
    # (the tmpfs gets 12 kB more for USER_FILES: a page each)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    out = output_of(command, mnt)
    argv = shell(command.argv(workspace, out))
    r = in_namespace(
        f"""
mount -t tmpfs -o size={pages_kb + 12}k tmpfs {mnt}
{"".join(f"mkdir -p {(mnt / f).parent}; echo 'keep me' > {mnt / f}; " for f in USER_FILES)}
{argv} > /dev/null 2> {tmp_path}/full.err
echo "full rc $?"
find {mnt} -name '*{TMP_MARK}*' {" ".join(f"! -path '{mnt / f}'" for f in USER_FILES)} | sed 's/^/left: /'
{user_files_listed(mnt, "failed")}
mount -o remount,size={needed_kb * 4 + 64}k {mnt}
{argv} > /dev/null 2> {tmp_path}/rerun.err
echo "rerun rc $?"
{user_files_listed(mnt, "rerun")}
cp -r {out} {tmp_path}/resumed
""",
        tmp_path,
        env=ptk_env(),
    )
    assert r.returncode == 0, r.stderr
    full_err = (tmp_path / "full.err").read_text()
    assert "full rc 0" not in r.stdout, f"{command} fit in {pages_kb} kB"
    line = error_line(full_err)
    assert "no space left on device" in line and str(mnt) in line, line
    assert "left: " not in r.stdout, r.stdout
    for when in ("failed", "rerun"):
        for f in USER_FILES:
            assert f"{when} {f}: keep me" in r.stdout, (when, f, r.stdout)
    assert "rerun rc 0" in r.stdout, (tmp_path / "rerun.err").read_text()[-3000:]
    resumed = tmp_path / "resumed"
    assert contents(command, resumed) == contents(command, reference)


def test_a_read_only_folder_is_one_line_for_every_command_that_writes(workspace, tmp_path: Path) -> None:
    """The output a new folder inside the read-only one, and (a command that writes a folder) the
    read-only folder itself."""
    ro = tmp_path / "ro"
    ro.mkdir()
    cases = {c.name: c.argv(workspace, output_of(c, ro / c.name)) for c in WRITERS}
    cases |= {f"{c.name}-into-it": c.argv(workspace, ro) for c in WRITERS if c.writes == "dir"}
    runs = "".join(
        f'{shell(argv)} > /dev/null 2> {tmp_path}/{name}.err; echo "{name} $?"\n' for name, argv in cases.items()
    )
    r = in_namespace(f"mount -t tmpfs -o ro tmpfs {ro}\n{runs}", tmp_path, env=ptk_env())
    assert r.returncode == 0, r.stderr
    for name in cases:
        assert f"{name} 0" not in r.stdout, (name, r.stdout)
        line = error_line((tmp_path / f"{name}.err").read_text())
        assert "read-only file system" in line and str(ro) in line, (name, line)
