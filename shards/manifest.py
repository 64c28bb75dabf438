"""`manifest.json`: what a shard set holds, how to check it, and where it came from.

    {"format": "arrow", "version": 1, "dtype": "uint16",
     "tokenizer": {"sha256": ..., "vocab_size": 8192, "eos_id": 0, "eos_token": "<|endoftext|>",
                   "vocab_fingerprint": ...},
     "shards": [{"file": "shard-00000.arrow", "docs": 120, "tokens": 51234, "bytes": 70311, "sha256": ...,
                 "batches": {"bytes": 2140, "sha256": ...}}],     # Arrow: its record-batch sidecar
     "totals": {"shards": 1, "docs": 120, "tokens": 51234, "bytes": 70311},
     "provenance": {...}}

`"urls": true` is there only in a set whose documents have addresses (records with a `url`, as
`ptk extract` writes them): its shards then hold each document's url (`shards/arrow_format.py`,
`shards/webdataset_format.py`). A set without urls has no such key, as before.

Provenance holds only what determines the content (inputs with their hashes, dedup stats, content
options, package version), never output paths, worker counts or times, so the same inputs give a
byte-identical manifest. It is written last: a directory without one is not a shard set.

Two shard sets share a tokenizer when `tokenizer_difference` finds nothing: the same vocabulary
fingerprint (shards/tokenizer.py), or for manifests written before it was recorded, the same
`tokenizer.json` sha256.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from pretrainkit.errors import UserError, quoted
from pretrainkit.files import write_text_atomic
from pretrainkit.shards.formats import FORMAT_VERSION, FORMATS, MANIFEST_NAME, READ_VERSIONS


@dataclass(frozen=True)
class ShardEntry:
    file: str
    docs: int
    tokens: int
    bytes: int
    sha256: str
    # Arrow shards: {"bytes", "sha256"} of `<file>.batches` (shards/batch_ranges.py); None for
    # WebDataset shards and in manifests written before the sidecar existed
    batches: dict | None = None


@dataclass(frozen=True)
class TokenizerInfo:
    sha256: str
    vocab_size: int
    eos_id: int
    eos_token: str
    vocab_fingerprint: str | None = None  # None in manifests written before it was recorded


def tokenizer_difference(a: TokenizerInfo, b: TokenizerInfo) -> str | None:
    """What differs between two tokenizers, as "A vs B" (None when they give the same ids)."""
    if a.vocab_size != b.vocab_size:
        return f"vocab size {a.vocab_size} vs {b.vocab_size}"
    if a.vocab_fingerprint is not None and b.vocab_fingerprint is not None:
        if a.vocab_fingerprint != b.vocab_fingerprint:
            return (
                f"same vocab size {a.vocab_size} but other tokens, merges or special tokens (vocabulary "
                f"fingerprint {a.vocab_fingerprint[:12]} vs {b.vocab_fingerprint[:12]})"
            )
    elif a.sha256 != b.sha256:
        return (
            f"tokenizer.json sha256 {a.sha256[:12]} vs {b.sha256[:12]} (a manifest without a vocabulary "
            "fingerprint compares file bytes only; tokenize again to compare vocabularies)"
        )
    if a.eos_id != b.eos_id:
        return f"EOS id {a.eos_id} vs {b.eos_id}"
    return None


def tokenizer_info(manifest: dict) -> TokenizerInfo:
    t = manifest["tokenizer"]
    return TokenizerInfo(t["sha256"], t["vocab_size"], t["eos_id"], t.get("eos_token", ""), t.get("vocab_fingerprint"))


def build_manifest(
    fmt: str, dtype: str, tokenizer: TokenizerInfo, shards: list[ShardEntry], provenance: dict, urls: bool = False
) -> dict:
    return {
        **({"urls": True} if urls else {}),
        "format": fmt,
        "version": FORMAT_VERSION[fmt],
        "dtype": dtype,
        "tokenizer": {k: v for k, v in asdict(tokenizer).items() if v is not None},
        "shards": [{k: v for k, v in asdict(s).items() if v is not None} for s in shards],
        "totals": {
            "shards": len(shards),
            "docs": sum(s.docs for s in shards),
            "tokens": sum(s.tokens for s in shards),
            "bytes": sum(s.bytes for s in shards),
        },
        "provenance": provenance,
    }


def manifest_json(manifest: dict) -> str:
    return json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_manifest(directory: str | Path, manifest: dict) -> None:
    write_text_atomic(Path(directory) / MANIFEST_NAME, manifest_json(manifest))


def fingerprint(manifest: dict) -> str:
    """sha256 over the per-shard sha256s, in order: identifies the token content of the set."""
    return hashlib.sha256("\n".join(s["sha256"] for s in manifest["shards"]).encode()).hexdigest()


def load_manifest(directory: str | Path) -> dict:
    """Parse and check `DIR/manifest.json`; UserError naming the file and the problem."""
    path = Path(directory) / MANIFEST_NAME
    if not Path(directory).is_dir():
        raise UserError(f"{directory}: not a directory")
    if not path.is_file():
        raise UserError(f"{path}: missing; not a finished shard set (was the writing run interrupted?)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not a readable manifest: {e}") from None
    return parse_manifest(text, str(path))


def parse_manifest(text: str | bytes, where: str) -> dict:
    """A manifest's text parsed and checked; UserError naming `where` (its file or URL) and the problem."""
    try:
        manifest = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{where}: not a readable manifest: {e}") from None
    _check(manifest, where)
    return manifest


def _check(m: object, path: str) -> None:
    def fail(msg: str) -> None:
        raise UserError(f"{path}: {msg}")

    if not isinstance(m, dict):
        fail("manifest is not a JSON object")
    for key, kind in (
        ("format", str),
        ("version", int),
        ("dtype", str),
        ("tokenizer", dict),
        ("shards", list),
        ("totals", dict),
    ):
        if not isinstance(m.get(key), kind):
            fail(f"key '{key}' missing or not a {kind.__name__}")
    if m["format"] not in FORMATS:
        fail(f"key 'format' is {quoted(m['format'])}, expected one of {', '.join(FORMATS)}")
    if m["version"] not in READ_VERSIONS[m["format"]]:
        readable = " or ".join(map(str, READ_VERSIONS[m["format"]]))
        fail(f"key 'version' is {m['version']}, this pretrainkit reads {m['format']} version {readable}")
    if m["dtype"] not in ("uint16", "uint32"):
        fail(f"key 'dtype' is {quoted(m['dtype'])}, expected uint16 or uint32")
    for key, kind in (("sha256", str), ("vocab_size", int), ("eos_id", int)):
        if not isinstance(m["tokenizer"].get(key), kind):
            fail(f"key 'tokenizer.{key}' missing or not a {kind.__name__}")
    if m.get("urls", True) is not True:
        fail(f"key 'urls' is {quoted(m['urls'])}, expected true (or no key: a set without urls)")
    if not isinstance(m["tokenizer"].get("vocab_fingerprint", ""), str):
        fail("key 'tokenizer.vocab_fingerprint' is not a str")
    for i, s in enumerate(m["shards"]):
        if not isinstance(s, dict) or not all(isinstance(s.get(k), t) for k, t in _SHARD_KEYS):
            fail(f"shards[{i}]: needs " + ", ".join(f"'{k}' ({t.__name__})" for k, t in _SHARD_KEYS))
        batches = s.get("batches", {"bytes": 0, "sha256": ""})
        if not isinstance(batches, dict) or not all(isinstance(batches.get(k), t) for k, t in _SHARD_KEYS[3:]):
            fail(f"shards[{i}].batches: needs 'bytes' (int), 'sha256' (str)")
    for key in ("docs", "tokens"):
        if m["totals"].get(key) != sum(s[key] for s in m["shards"]):
            fail(f"key 'totals.{key}' does not match the sum over shards")


_SHARD_KEYS = (("file", str), ("docs", int), ("tokens", int), ("bytes", int), ("sha256", str))
