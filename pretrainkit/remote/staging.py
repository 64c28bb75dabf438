"""A dataprep command's URL arguments as local paths: inputs fetched into a work folder, OUT written
into a local staging folder and published to the bucket when the command ends.

    spec = UrlArguments(inputs=("inputs",), files=("against",), output="output")
    with local_arguments(args, spec):       # args.inputs, args.against, args.output now local paths
        status = args.func(args)            # the command as on local paths: same code, same bytes
                                            # -> then OUT's files published to the bucket, the stats last

Why staging: every guarantee of the commands (byte-identical outputs, resume after kill -9, bounded
memory, the output folder's marker and lock) rests on local files that are renamed into place.
Running the unchanged command on a local folder keeps all of them; publishing is a second, simple step:

- Inputs: a URL input (an object or a prefix, read as a folder) is downloaded into
  `WORK/inputs/<scheme>/<bucket>/<key>`, mirroring the bucket's layout, so records are named relative to
  the inputs exactly as for a local copy of them. A file already there at the object's size and version
  (ETag, generation or modification time, as `WORK/fetched/<hash of the URL>.json` recorded it when it
  was fetched) is taken as it is (a rerun after a kill does not fetch it again; a changed object is);
  the copies are removed when the command succeeds.
- Output: OUT is written in `WORK/outputs/<hash of the URL>/`; the command's work files (`.work/`)
  never leave it. When the command succeeds, every other file is uploaded through a temporary key
  (`remote.transfer.upload_all`): first the stats and manifests the bucket already holds are deleted, then
  the files in sorted order, then the objects of an earlier run that this one did not write are
  deleted, and last the stats (`stats.json`) and manifests (`manifest.json`), the deepest first: a
  reader that finds the top `stats.json` (or a shard set's `manifest.json`) finds everything it lists.
  Then the staging folder is removed. A command that fails or is killed leaves it, so the same command
  resumes from it on this machine (on another, it starts over and publishes the same bytes).
- Ownership: the bucket's output marker (`pretrainkit.output_folders`) is fetched into the staging
  folder first, so a command refuses a prefix holding another command's output as it refuses a
  folder; a prefix holding objects of no ptk output is refused. Two machines writing one prefix at
  once are not detected (the lock is local).

WORK is `--work-dir`, else `$PTK_WORK_DIR`, else `pretrainkit-work` in the system's temporary folder.
Messages and summaries name the URLs, not the staging paths (`shown`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pretrainkit.errors import UserError, shortened
from pretrainkit.files import is_temporary, json_object_or_none, write_text_atomic
from pretrainkit.progress import progress_bar
from pretrainkit.remote.transfer import (
    download,
    download_all,
    list_tree,
    list_versions,
    remove_all,
    upload,
    upload_all,
)
from pretrainkit.remote.urls import BACKENDS, filesystem, is_url, join, scheme
from pretrainkit.stage_layout import LOCK_NAME, MARKER_NAME, WORK_NAME

WORK_DIR_ENV = "PTK_WORK_DIR"
RAY_WORK_NAME = ".ptk-work"  # the staging folder carried to Ray nodes without the driver's filesystem
FINISHING_NAMES = ("stats.json", "manifest.json")  # published last: their presence says the rest is there
BATCH_FILES, BATCH_BYTES = 64, 512 << 20  # transferred at once (concurrent requests), between progress updates

_SHOWN: dict[str, str] = {}  # staging path -> the URL it stands for, for messages
_RUN = {"work": None, "fetched": []}  # the running command's work folder, and the inputs fetched for it
_OUTPUTS: dict[Path, str] = {}  # staging folder -> the output URL it is published to


@dataclass(frozen=True)
class UrlArguments:
    """Which attributes of a command's parsed arguments may be URLs."""

    inputs: tuple[str, ...] = ()  # each a list of input files or folders
    # Of an input URL's files (the URL, its files by relative path: size), those to fetch; None: all.
    # The command that reads the inputs knows which files it takes from them (`dataprep.readers`).
    select_inputs: Callable[[str, dict[str, int]], dict[str, int]] | None = None
    files: tuple[str, ...] = ()  # each one path (or a list of paths) to a file or folder read whole
    # (attribute, select): each a folder (or a list of them) of which only the files `select` picks from its
    # listing (relative path: size) are fetched; a training run's: `train/rundir/run_files.py`
    selected: tuple[tuple[str, Callable[[dict[str, int]], dict[str, int]]], ...] = ()
    output: str | None = None  # the output folder


def refuse_local_output_urls(args: argparse.Namespace, names: tuple[str, ...]) -> None:
    """A storage URL given for an argument the command writes as a local path (`names`: its parser's
    `local_outputs`) is one line, before anything is read or written: `s3://b/x` would be written to
    the local folder `s3:/b/x` with exit 0 (or, typed as a `Path`, fail later)."""
    for name in names:
        value = getattr(args, name, None)
        if _storage_url(value):
            command = " ".join(str(v) for k, v in vars(args).items() if k == "command" or k.endswith("_command"))
            raise UserError(
                f"{value}: ptk {command} writes {name} to a local path, not a URL "
                "(what takes URLs: docs/object-storage.md)"
            )


def _storage_url(value: object) -> bool:
    """Whether `value` is a URL of a storage scheme, also as a `Path` made of one (`s3:/b/x`: a slash lost)."""
    if not isinstance(value, (str, os.PathLike)):
        return False
    head, colon, _ = os.fspath(value).partition(":/")
    return bool(colon) and head.lower() in BACKENDS


def work_dir(given: str | os.PathLike | None = None) -> Path:
    return Path(given or os.environ.get(WORK_DIR_ENV) or Path(tempfile.gettempdir()) / "pretrainkit-work")


def shown(text: str) -> str:
    """`text` with every staging path in it replaced by the URL it stands for."""
    for local, url in sorted(_SHOWN.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(local, url)
    return text


@contextlib.contextmanager
def local_arguments(args: argparse.Namespace, spec: UrlArguments) -> Iterator[None]:
    """Replace the URL arguments `spec` names by local paths for the body; publish OUT after it."""
    work = work_dir(getattr(args, "work_dir", None))
    _RUN.update(work=work, fetched=[])
    output_url = getattr(args, spec.output) if spec.output else None
    if is_url(output_url):
        _refuse_overlap(args, spec, output_url)
    for name in spec.inputs + spec.files:
        value = getattr(args, name, None)
        select = spec.select_inputs if name in spec.inputs else None
        if isinstance(value, list):
            setattr(args, name, [_local_input(v, select) for v in value])
        elif value is not None:
            setattr(args, name, _local_input(value, select))
    for name, select in spec.selected:
        value = getattr(args, name, None)
        if isinstance(value, list):
            setattr(args, name, [local_copy(v, select=select) for v in value])
        elif value is not None:
            setattr(args, name, local_copy(value, select=select))
    staging = None
    if is_url(output_url):
        staging = staging_folder(output_url, work)
        setattr(args, spec.output, staging)
        show_as(staging, output_url)
        _OUTPUTS[staging] = output_url.rstrip("/")
    with showing_urls():
        yield
    if staging is not None:
        publish(staging, output_url)
        shutil.rmtree(staging, ignore_errors=True)
        del _OUTPUTS[staging]
    for local, record in _RUN["fetched"]:  # kept after a failure: a rerun takes those still of this version
        if local.is_dir():
            shutil.rmtree(local, ignore_errors=True)
        else:
            local.unlink(missing_ok=True)
        record.unlink(missing_ok=True)


def output_url_of(path: str | os.PathLike) -> tuple[Path, str] | None:
    """(staging folder, output URL) of the running command's staging folder holding `path`, if one does."""
    path = Path(path).absolute()
    for staging, url in _OUTPUTS.items():
        if path.is_relative_to(staging):
            return staging, url
    return None


def show_as(local: Path, url: str) -> None:
    """Name `url` in messages wherever they would name the local folder `local` that stands for it."""
    _SHOWN[str(local)] = url.rstrip("/")


@contextlib.contextmanager
def showing_urls() -> Iterator[None]:
    """sys.stdout and sys.stderr through `shown` for the body (local folders may come to stand for URLs
    while it runs: a mixture's shard sets fetched from a bucket)."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _ShowingUrls(sys.stdout), _ShowingUrls(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = streams


class _ShowingUrls:
    """A text stream that writes through `shown`, so that what any part of a command prints names the
    URLs it was given, not their local copies."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(shown(text))
        return len(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _local_input(value: object, select: Callable[[str, dict[str, int]], dict[str, int]] | None) -> object:
    """`local_copy` of an input, fetching of a URL folder only the files `select(url, files)` picks."""
    if select is None or not is_url(value):
        return local_copy(value)
    return local_copy(value, select=functools.partial(select, str(value).rstrip("/")))


def local_copy(value: object, select: Callable[[dict[str, int]], dict[str, int]] | None = None) -> object:
    """A URL input (an object, or a prefix as a folder) as the local path it is fetched to, in the running
    command's work folder; anything else as it is. Also for paths that a file names (a pipeline file's).
    `select`: of a folder's files (relative path: size), those to fetch (`UrlArguments.select_inputs`,
    `UrlArguments.selected`)."""
    if not is_url(value):
        return value
    work = _RUN["work"] or work_dir()
    url = str(value).rstrip("/")
    versions = {rel: v for rel, v in list_versions(url).items() if not is_temporary(rel.rsplit("/", 1)[-1])}
    listing = {rel: size for rel, (size, _) in versions.items()}
    if not listing:
        raise UserError(f"{url}: no such file or directory")
    if select is not None and "" not in listing:
        listing = select(listing)
    fs, key = filesystem(url)
    local = work / "inputs" / scheme(url) / key.strip("/")
    record = work / "fetched" / f"{hashlib.sha256(url.encode()).hexdigest()[:16]}.json"
    # rel -> the version fetched, by an earlier, interrupted run too (none, or cut short: all fetched again)
    held: dict[str, str] = json_object_or_none(record) or {}
    wanted = {
        rel: size
        for rel, size in listing.items()
        if not (_have(local / rel if rel else local, size) and held.get(rel) == versions[rel][1])
    }

    def fetch(batch: list[str]) -> None:
        download_all([(join(url, rel), local / rel) for rel in batch], url)
        held.update({rel: versions[rel][1] for rel in batch})
        write_text_atomic(record, json.dumps(held, sort_keys=True))

    in_batches(wanted, "fetch", fetch)
    _SHOWN[str(work / "inputs" / scheme(url))] = f"{scheme(url)}:/"  # the layout mirrors the bucket's
    _RUN["fetched"].append((local, record))
    return str(local)


def in_batches(sizes: dict[str, int], desc: str, transfer: Callable[[list[str]], None]) -> None:
    """`transfer` the named files (by size) a batch at a time, largest batches of `BATCH_BYTES` or
    `BATCH_FILES`, with a progress bar in bytes: each batch's requests run at once."""
    with progress_bar(total=sum(sizes.values()), desc=desc, unit="B", unit_scale=True, leave=False) as bar:
        batch: list[str] = []
        for i, rel in enumerate(sizes):
            batch.append(rel)
            if i == len(sizes) - 1 or len(batch) == BATCH_FILES or sum(sizes[r] for r in batch) >= BATCH_BYTES:
                transfer(batch)
                bar.update(sum(sizes[r] for r in batch))
                batch = []


def _have(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _refuse_overlap(args: argparse.Namespace, spec: UrlArguments, output_url: str) -> None:
    """An output URL and its input URLs must not hold one another (as `dataprep.readers.refuse_overlap`
    says of local folders), said before anything is fetched."""
    out = output_url.rstrip("/")
    for name in spec.inputs + spec.files:
        value = getattr(args, name, None)
        for given in value if isinstance(value, list) else [value]:
            if not is_url(given):
                continue
            if given.rstrip("/") == out or given.startswith(out + "/"):
                raise UserError(f"{given}: input lies inside the output directory {output_url}; choose another -o")
            if out.startswith(given.rstrip("/") + "/"):
                raise UserError(f"{output_url}: output lies inside the input folder {given}; choose another -o")


def staging_path(url: str, work: Path) -> Path:
    """The local folder an output URL is written in: the same for every process of a machine."""
    return work / "outputs" / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]


def staging_folder(url: str, work: Path) -> Path:
    """`staging_path`, with the bucket's output marker fetched into it (see the module docstring:
    Ownership); a UserError for a prefix holding objects of no ptk output."""
    filesystem(url, writing=True)
    listing = list_tree(url)
    staging = staging_path(url, work)
    if listing.get(MARKER_NAME) is not None:
        if not (staging / MARKER_NAME).is_file():
            download(join(url, MARKER_NAME), staging / MARKER_NAME)
    else:
        others = [
            rel for rel in listing if not is_temporary(rel.rsplit("/", 1)[-1]) and rel.split("/")[0] != RAY_WORK_NAME
        ]
        if others:
            shown_names = ", ".join(shortened(n, 60) for n in others[:3])
            more = f" and {len(others) - 3} more" if len(others) > 3 else ""
            raise UserError(
                f"{url}: holds objects of no ptk output ({shown_names}{more}); "
                "write into an empty prefix or an earlier run's output"
            )
    return staging


def publish(staging: Path, url: str) -> None:
    """Upload the staging folder's files to `url` in the order the module docstring gives."""
    files = sorted(
        p.relative_to(staging).as_posix()
        for p in staging.rglob("*")
        if p.is_file() and _published(p.relative_to(staging))
    )
    finishing = sorted(
        (rel for rel in files if rel.rsplit("/", 1)[-1] in FINISHING_NAMES), key=lambda rel: (-rel.count("/"), rel)
    )
    before = list_tree(url)
    remove_all([join(url, rel) for rel in finishing if rel in before], url)
    sizes = {rel: (staging / rel).stat().st_size for rel in files}
    rest = {rel: size for rel, size in sizes.items() if rel not in finishing}
    in_batches(rest, "publish", lambda batch: upload_all([(staging / rel, join(url, rel)) for rel in batch], url))
    remove_all([join(url, rel) for rel in sorted(set(before) - set(files))], url)
    for rel in finishing:
        upload(staging / rel, join(url, rel))
    total = sum(sizes.values())
    print(f"published {len(files):,} files ({total / 1e6:,.1f} MB) to {url}", file=sys.stderr)


def _published(rel: Path) -> bool:
    return not (WORK_NAME in rel.parts or rel.name == LOCK_NAME or is_temporary(rel.name))
