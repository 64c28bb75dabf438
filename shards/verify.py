"""Check a shard set against its manifest: every listed file present, of the listed size and sha256,
and no shard file the manifest does not list (a stray from another run is not part of the set).

    problems = verify_shards("shards/")   # [] when whole; one line per missing/truncated/altered/unlisted file
    check_shards_whole("shards/", manifest, where="--shards shards/")  # or a UserError naming the first problem
"""

from __future__ import annotations

from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file
from pretrainkit.shards.formats import SHARD_NAME_RE
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
        path = directory / entry["file"]
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        size = path.stat().st_size
        if size != entry["bytes"]:
            kind = "truncated" if size < entry["bytes"] else "wrong size"
            problems.append(f"{path}: {kind}: {size} bytes, manifest says {entry['bytes']}")
        elif sha256_file(path) != entry["sha256"]:
            problems.append(f"{path}: altered: sha256 differs from the manifest")
    listed = {entry["file"] for entry in manifest["shards"]}
    problems += [
        f"{p}: not listed in the manifest"
        for p in sorted(directory.iterdir())
        if SHARD_NAME_RE.match(p.name) and p.name not in listed
    ]
    return problems


def check_shards_whole(directory: str | Path, manifest: dict, where: str, progress: bool = False) -> None:
    """What a reader runs before it reads a shard set: a UserError `WHERE: shard set fails verification:
    PROBLEM (and N more)` unless `verify_shards` finds nothing."""
    problems = verify_shards(directory, manifest, progress=progress)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{where}: shard set fails verification: {problems[0]}{more}")
