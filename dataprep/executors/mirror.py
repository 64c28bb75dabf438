"""Ray tasks on nodes that do not see the driver's files: the output's staging folder carried through
the output's bucket, so that `--executor ray` needs no shared filesystem when inputs and output are URLs.

    mirror = plan_mirror(inputs, out_dir, session)        # or a str: why out_dir cannot be carried
    driver = DriverCopy(mirror)
    driver.publish()                                      # before each stage: the tree as the driver has it
    result, files = run_on_node(driver.mirror, fn, job, node)  # on a node that does not see the tree
    driver.take(files)                                    # the files that job wrote, into the driver's tree

A command with a URL output runs in a local staging folder (`pretrainkit.remote.staging`), its URL
inputs fetched under the work folder. A node whose filesystem is not the driver's holds its own copy
of that tree at the same path:

- Before each stage, the driver uploads the files of its tree that the bucket's copy lacks to
  `OUT/.ptk-work/files/`, and then `OUT/.ptk-work/tree.json`: every file's size and version (its
  mtime on the driver), every directory, and the session (one per run of the command).
- A task on such a node first brings the node's copy to `tree.json`, under a lock the node's tasks
  share: files it lacks or holds in another version are downloaded, files the driver no longer has
  are deleted, the URL inputs are fetched once per node. A copy from another session is discarded
  whole, so a resumed command resumes from what its driver holds, never from a node's leftovers.
- After the job, the task uploads every file of the copy that is not as it was fetched or uploaded
  (what the job wrote) and returns their names with its result; the driver downloads them into its
  tree. The jobs of one stage never read each other's files, so a stage sees what the stages before
  it wrote, as on a shared filesystem, and the outputs are the same bytes.

Downloads are atomic at their destination (`remote.transfer`). The area's files are written straight
to their keys (no temporary key and copy: none is read before its writer has returned, the driver
then lists it), and `tree.json` through a temporary key, as outputs are. The area is deleted by the
publication that ends the command (`remote.staging.publish` removes what the run did not write) and
the nodes' copies by the runner when the command succeeds. Cost: each such node fetches the URL
inputs whole once and the work files of every stage; a node that sees the driver's files (the
driver's own) runs its jobs in the driver's tree directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pretrainkit.errors import UserError
from pretrainkit.files import is_temporary, json_object_or_none, write_text_atomic
from pretrainkit.remote.staging import BATCH_FILES, RAY_WORK_NAME, output_url_of, shown
from pretrainkit.remote.transfer import download_all, list_tree, put_all, read_bytes, remove_all, upload
from pretrainkit.remote.urls import join
from pretrainkit.stage_layout import LOCK_NAME

TREE_NAME = "tree.json"


@dataclass(frozen=True)
class Mirror:
    tree: str  # the output's staging folder: the same absolute path on every node
    area: str  # its URL area, `OUT/.ptk-work`
    inputs: tuple[tuple[str, str, int], ...]  # (local path, URL, size) of the URL inputs read from outside the tree
    session: str  # written in `tree`.driver on the driver's filesystem
    generation: int = 0  # how many times the driver has published `tree.json` (once per stage)

    def file_url(self, rel: str) -> str:
        """Where the area holds the tree's file `rel`."""
        return join(self.area, "files", rel)

    def sees_driver_files(self) -> bool:
        """On a node: does it see the driver's filesystem (and so run in the driver's tree)?"""
        try:
            return Path(f"{self.tree}.driver").read_text() == self.session
        except OSError:
            return False


@dataclass(frozen=True)
class NodeResult:
    """What a job run in a node's copy of the tree returns: its result, and the files it wrote."""

    result: Any
    files: list[str]


def plan_mirror(inputs: Sequence[str], out_dir: Path, session: str) -> Mirror | str:
    """The mirror of `out_dir`'s staging folder, or why there can be none (a message naming the path)."""
    staged = output_url_of(out_dir)
    if staged is None:
        return f"{out_dir}: the output is a local folder"
    tree, url = staged
    carried = []
    for path in inputs:
        local = Path(path).absolute()
        if local.is_relative_to(tree):
            continue
        source = shown(str(local))
        if source == str(local):
            return f"{path}: a local input"
        files = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local]  # --against's index
        for file in files:
            rel = file.relative_to(local).as_posix()
            carried.append((str(file), join(source, rel) if rel != "." else source, file.stat().st_size))
    return Mirror(str(tree), join(url, RAY_WORK_NAME), tuple(carried), session)


class DriverCopy:
    """The driver's side: its tree uploaded before each stage, the nodes' files taken after each job."""

    def __init__(self, mirror: Mirror):
        self.mirror = mirror
        self.tree = Path(mirror.tree)
        self._in_area: dict[str, tuple[int, int]] = {}  # rel -> (size, mtime_ns) of the file the area holds
        existing = list_tree(mirror.area)
        remove_all([join(mirror.area, rel) for rel in existing], mirror.area)  # an earlier session's
        write_text_atomic(f"{mirror.tree}.driver", mirror.session)

    def publish(self) -> None:
        """Upload what the tree gained and its listing, as the next generation (`self.mirror` then names it)."""
        self.mirror = dataclasses.replace(self.mirror, generation=self.mirror.generation + 1)
        files, dirs = {}, []
        for path in sorted(self.tree.rglob("*")):
            rel = path.relative_to(self.tree).as_posix()
            if path.is_dir():
                dirs.append(rel)
            elif _carried(path.name):
                stat = path.stat()
                files[rel] = (stat.st_size, stat.st_mtime_ns)
        changed = [rel for rel, version in files.items() if self._in_area.get(rel) != version]
        for batch in _batches(changed):
            put_all([(self.tree / rel, self.mirror.file_url(rel)) for rel in batch], self.mirror.area)
        self._in_area.update({rel: files[rel] for rel in changed})
        listing = {"session": self.mirror.session, "generation": self.mirror.generation, "files": files, "dirs": dirs}
        text = json.dumps(listing, sort_keys=True)
        local = Path(f"{self.mirror.tree}.tree.json")
        write_text_atomic(local, text)
        upload(local, join(self.mirror.area, TREE_NAME))

    def take(self, files: Sequence[str]) -> None:
        for batch in _batches(sorted(files)):
            download_all([(self.mirror.file_url(rel), self.tree / rel) for rel in batch], self.mirror.area)
        for rel in files:
            stat = (self.tree / rel).stat()
            self._in_area[rel] = (stat.st_size, stat.st_mtime_ns)

    def close(self) -> None:
        Path(f"{self.mirror.tree}.driver").unlink(missing_ok=True)
        Path(f"{self.mirror.tree}.tree.json").unlink(missing_ok=True)


def run_on_node(mirror: Mirror, fn: Callable[[Any], Any], job: Any, node: str) -> tuple[Any, list[str]]:
    """On a node that does not see the driver's files (`node` names it in messages): fn(job) in the
    node's copy of the tree; returns its result and the files it wrote (uploaded to the area)."""
    folder = Path(mirror.tree).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"{folder}: cannot create the work folder on a Ray node ({e.strerror or e}); "
            "give --work-dir a folder every node can write"
        ) from None
    with _naming(node):
        _bring_up_to_date(mirror)
    result = fn(job)
    with _naming(node):
        return result, _upload_written(mirror)


@contextlib.contextmanager
def _naming(node: str) -> Iterator[None]:
    """A storage error while carrying the tree, with the node that met it (its credentials are its own)."""
    try:
        yield
    except UserError as e:
        raise UserError(
            f"{e} (on {node}, which reaches the bucket with the credentials and endpoint of its own environment: "
            "the standard variables where its `ray start` ran)"
        ) from None


def forget(mirror: Mirror) -> None:
    """On such a node, after the command: its copy of the tree and of the inputs removed."""
    with _node_lock(mirror):
        shutil.rmtree(mirror.tree, ignore_errors=True)
        for local, _, _ in mirror.inputs:
            Path(local).unlink(missing_ok=True)
        Path(_record_path(mirror)).unlink(missing_ok=True)
        _lock_path(mirror).unlink(missing_ok=True)  # the command's last task on the node


def _bring_up_to_date(mirror: Mirror) -> None:
    tree = Path(mirror.tree)
    with _node_lock(mirror):
        record = _read_record(mirror)
        if (record.get("session"), record.get("generation")) == (mirror.session, mirror.generation):
            return  # an earlier task of this stage on this node brought it up to date
        listing = json.loads(read_bytes(join(mirror.area, TREE_NAME)))
        if record.get("session") != listing["session"]:  # the inputs too: an object may have changed since
            shutil.rmtree(tree, ignore_errors=True)
            for local, _, _ in mirror.inputs:
                Path(local).unlink(missing_ok=True)
            record = {"session": listing["session"], "files": {}}
        record["generation"] = listing["generation"]
        held = record["files"]  # rel -> {"version": the driver's, or None for a file this node wrote; "local": stat}
        wanted = listing["files"]
        # No job of this stage has run here yet (they wait for this lock), and the driver took every file
        # of the stages before: a file the listing lacks is one the driver deleted, or a killed job's.
        for rel in _tree_files(tree) - wanted.keys():
            (tree / rel).unlink(missing_ok=True)
            held.pop(rel, None)
        for rel in listing["dirs"]:
            (tree / rel).mkdir(parents=True, exist_ok=True)
        fetch = []
        for rel, version in wanted.items():
            entry = held.get(rel)
            if entry and _stat(tree / rel) == tuple(entry["local"]):
                if entry["version"] == version:
                    continue
                if entry["version"] is None and entry["local"][0] == version[0]:  # this node's own upload
                    entry["version"] = version
                    continue
            fetch.append(rel)
        for batch in _batches(fetch):
            download_all([(mirror.file_url(rel), tree / rel) for rel in batch], mirror.area)
        for rel in fetch:
            held[rel] = {"version": wanted[rel], "local": _stat(tree / rel)}
        missing = [(url, local) for local, url, size in mirror.inputs if _stat(Path(local))[0] != size]
        for batch in _batches(missing):
            download_all(batch, batch[0][0])
        write_text_atomic(_record_path(mirror), json.dumps(record))


def _upload_written(mirror: Mirror) -> list[str]:
    tree = Path(mirror.tree)
    with _node_lock(mirror):
        held = _read_record(mirror)["files"]
        written = {}
        for rel in sorted(_tree_files(tree)):
            stat = _stat(tree / rel)
            if rel not in held or tuple(held[rel]["local"]) != stat:
                written[rel] = stat
    for batch in _batches(list(written)):
        put_all([(tree / rel, mirror.file_url(rel)) for rel in batch], mirror.area)
    with _node_lock(mirror):
        record = _read_record(mirror)
        record["files"].update({rel: {"version": None, "local": stat} for rel, stat in written.items()})
        write_text_atomic(_record_path(mirror), json.dumps(record))
    return list(written)


def _tree_files(tree: Path) -> set[str]:
    """The carried files of a node's copy of the tree, by relative path."""
    return {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() and _carried(p.name)}


def _carried(name: str) -> bool:
    return name != LOCK_NAME and not is_temporary(name)


def _stat(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return (-1, -1)
    return (stat.st_size, stat.st_mtime_ns)


def _record_path(mirror: Mirror) -> str:
    return f"{mirror.tree}.node.json"


def _lock_path(mirror: Mirror) -> Path:
    return Path(f"{mirror.tree}.node.lock")


def _read_record(mirror: Mirror) -> dict:
    return json_object_or_none(_record_path(mirror)) or {"session": None, "files": {}}


@contextlib.contextmanager
def _node_lock(mirror: Mirror) -> Iterator[None]:
    path = _lock_path(mirror)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _batches(items: Sequence) -> Iterator[list]:
    items = list(items)
    for start in range(0, len(items), BATCH_FILES):
        yield items[start : start + BATCH_FILES]
