"""Check a shard set against its manifest: every listed file (shards and their record-batch sidecars)
present, of the listed size and sha256, and no shard file the manifest does not list (a stray from
another run is not part of the set).

    problems = verify_shards("shards/")   # [] when whole; one line per missing/truncated/altered/unlisted file
    check_shards_whole("shards/", manifest, where="--shards shards/")  # or a UserError naming the first problem
"""

from __future__ import annotations

from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file
from pretrainkit.shards.batch_ranges import sidecar_name
from pretrainkit.shards.formats import SHARD_FILE_RE
from pretrainkit.shards.manifest import load_manifest


def verify_shards(directory: str | Path, manifest: dict | None = None, progress: bool = False) -> list[str]:
    directory = Path(directory)
    manifest = manifest if manifest is not None else load_manifest(directory)
    shards = manifest["shards"]
    if progress:
        from pretrainkit.progress import progress_bar

        shards = progress_bar(shards, desc="verify", unit="shard")
    problems = []
    for entry in shards:
        problems += _file_problems(directory / entry["file"], entry["bytes"], entry["sha256"])
        if "batches" in entry:
            sidecar = directory / sidecar_name(entry["file"])
            problems += _file_problems(sidecar, entry["batches"]["bytes"], entry["batches"]["sha256"])
    listed = set(listed_files(manifest))
    problems += [
        f"{p}: not listed in the manifest"
        for p in sorted(directory.iterdir())
        if SHARD_FILE_RE.match(p.name) and p.name not in listed
    ]
    return problems


def listed_files(manifest: dict) -> dict[str, tuple[int, str]]:
    """Every file the manifest lists (shards, then each one's sidecar), with its size and sha256."""
    files = {}
    for entry in manifest["shards"]:
        files[entry["file"]] = (entry["bytes"], entry["sha256"])
        if "batches" in entry:
            files[sidecar_name(entry["file"])] = (entry["batches"]["bytes"], entry["batches"]["sha256"])
    return files


def _file_problems(path: Path, listed_size: int, digest: str) -> list[str]:
    if not path.is_file():
        return [f"{path}: missing"]
    size = path.stat().st_size
    if size != listed_size:
        kind = "truncated" if size < listed_size else "wrong size"
        return [f"{path}: {kind}: {size} bytes, manifest says {listed_size}"]
    if sha256_file(path) != digest:
        return [f"{path}: altered: sha256 differs from the manifest"]
    return []


def check_shards_whole(directory: str | Path, manifest: dict, where: str, progress: bool = False) -> None:
    """What a reader runs before it reads a shard set: a UserError `WHERE: shard set fails verification:
    PROBLEM (and N more)` unless `verify_shards` finds nothing."""
    problems = verify_shards(directory, manifest, progress=progress)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{where}: shard set fails verification: {problems[0]}{more}")
