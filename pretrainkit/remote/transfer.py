"""Copies between object storage and local files, each published atomically at its destination.

    listing = list_tree("s3://bucket/corpus")                # {"a/part-0.jsonl": 1234, ...}
    download("s3://bucket/corpus/a/part-0.jsonl", local)     # to `local`.tmp-PID, renamed into place
    upload(local, "s3://bucket/out/stats.json")              # under a temporary key, copied, deleted

A bucket has no rename: an upload goes to `KEY.tmp-PID` first, is copied to KEY by the service and
the temporary deleted, so a reader of KEY sees the whole object or none (`pretrainkit/files.py`'s
temporaries, the same names). A kill in between leaves a temporary key that no reader takes and the
next publication of the folder removes (`remote.staging`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pretrainkit.files import TMP_MARK, atomic_write, release_temporary, temporary_path
from pretrainkit.remote.urls import filesystem, storage_errors

CHUNK = 8 << 20  # bytes per read from a remote file


# What backends report as an object's version, in order of preference (S3, Azure; GCS; mtimes).
VERSION_KEYS = ("ETag", "etag", "md5Hash", "generation", "LastModified", "last_modified", "mtime")


def list_tree(url: str) -> dict[str, int]:
    """Every object under `url` (a folder prefix) by its path relative to `url`, with its size;
    {} when there is none. A single object is listed as {"": size}."""
    return {rel: size for rel, (size, _) in list_versions(url).items()}


def list_versions(url: str) -> dict[str, tuple[int, str]]:
    """`list_tree`, each object with its version as its backend reports it (`VERSION_KEYS`: the first
    one given, as text; "" when none is), so that a changed object of the same size is told apart."""
    fs, root = filesystem(url)
    with storage_errors(url, "list"):
        try:  # not `fs.isfile`: it takes any error for "not a file", and an endpoint that timed out is asked again
            info = fs.info(root)
        except FileNotFoundError:
            info = {}
        if info.get("type") == "file":
            return {"": _sized(info)}
        found = fs.find(root, detail=True)
    root = root.rstrip("/")
    return {
        name[len(root) + 1 :]: _sized(info)
        for name, info in sorted(found.items())
        if info.get("type") != "directory" and name.startswith(root + "/")
    }


def _sized(info: dict) -> tuple[int, str]:
    version = next((info[key] for key in VERSION_KEYS if info.get(key) is not None), "")
    return int(info.get("size") or 0), str(version)


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    with storage_errors(url, "look up"):
        return bool(fs.exists(path))


def download(url: str, local: str | os.PathLike) -> Path:
    """Copy object `url` to the local file `local` (atomically); returns `local`."""
    fs, path = filesystem(url)
    local = Path(local)
    with storage_errors(url, "download"), fs.open(path, "rb", block_size=CHUNK) as src:
        with atomic_write(local, "wb", durable=False) as dst:
            while chunk := src.read(CHUNK):
                dst.write(chunk)
    return local


def read_bytes(url: str) -> bytes:
    fs, path = filesystem(url)
    with storage_errors(url, "read"):
        return fs.cat_file(path)


def upload(local: str | os.PathLike, url: str) -> None:
    """Publish the local file `local` as object `url`: through a temporary key, so never half-written."""
    upload_all([(local, url)], url)


def upload_all(files: Sequence[tuple[str | os.PathLike, str]], where: str) -> None:
    """Publish each (local file, URL) as `upload` does, the files at once (the backend runs its requests
    concurrently: one at a time, a request's latency would dominate small files). All URLs are on
    the filesystem of `where`, which errors name."""
    if not files:
        return
    fs, _ = filesystem(where, writing=True)
    finals = [filesystem(url, writing=True)[1] for _, url in files]
    tmps = [f"{path}{TMP_MARK}{os.getpid()}" for path in finals]
    with storage_errors(where, "write"):
        fs.put([os.fspath(local) for local, _ in files], tmps)
        fs.copy(tmps, finals)
        fs.rm(tmps)


def put_all(files: Sequence[tuple[str | os.PathLike, str]], where: str) -> None:
    """Write each (local file, URL) straight to its key, the files at once: for work files that no
    reader takes before the writer has returned (`dataprep.executors.mirror`), not for outputs."""
    if files:
        fs, _ = filesystem(where, writing=True)
        with storage_errors(where, "write"):
            fs.put([os.fspath(local) for local, _ in files], [filesystem(url, writing=True)[1] for _, url in files])


def download_all(files: Sequence[tuple[str, str | os.PathLike]], where: str) -> None:
    """Copy each (URL, local file) as `download` does, the objects at once; errors name `where`."""
    if not files:
        return
    fs, _ = filesystem(where)
    tmps = [temporary_path(local) for _, local in files]
    try:
        for tmp in tmps:
            tmp.parent.mkdir(parents=True, exist_ok=True)
        with storage_errors(where, "download"):
            fs.get([filesystem(url)[1] for url, _ in files], [str(tmp) for tmp in tmps])
        for tmp, (_, local) in zip(tmps, files):
            os.replace(tmp, local)
    finally:
        for tmp in tmps:
            tmp.unlink(missing_ok=True)
            release_temporary(tmp)


def remove_all(urls: Sequence[str], where: str) -> None:
    """Delete the objects `urls` (at once) on the filesystem of `where`, which errors name."""
    if urls:
        fs, _ = filesystem(where, writing=True)
        with storage_errors(where, "delete"):
            fs.rm([filesystem(url, writing=True)[1] for url in urls])
