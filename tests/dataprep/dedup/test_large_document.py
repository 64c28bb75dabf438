"""One large document (issue 13 item 7): dedup's scan and tokenize's encode hold a small multiple
of it above a worker's steady state, and give exactly what the whole-document computation gives.

Memory is measured in a child process by the kernel's high-water mark (VmHWM, reset through
/proc/self/clear_refs once the worker has handled a small corpus), so no peak is missed by sampling.
The floor is parsing the record: its bytes, orjson's unescaped copy of the text and the Python
string (2 bytes a character for this text, which has characters beyond Latin-1) are 4x the
document at once; the rest of the bound is what glibc's heap keeps beside them at this size
(measured: dedup 3.0x, tokenize 4.0-5.5x; at 48 MB 4.4x and 4.0x).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from fixtures.corpora import DATA, ROOT, need_data, write_document
from pretrainkit.dataprep.dedup.minhash import MinHasher, band_hashes, near_normal_bytes
from pretrainkit.shards.tokenizer import load_tokenizer, train_tokenizer

pytestmark = pytest.mark.slow  # two child processes and two whole-document references: ~10 s

DOCUMENT_MB = 8
MULTIPLE = 6.0  # peak growth over the document's UTF-8 size, the bound docs/dedup.md states

_WORKER = r"""
import json, sys
mode, doc, small, work, tok = sys.argv[1:6]
from pretrainkit.dataprep.readers import discover_inputs, plan_read_tasks

def kb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

def tasks(path):
    return tuple(plan_read_tasks(discover_inputs([path])))

if mode == "dedup":
    from pretrainkit.dataprep.dedup.scan import ScanJob, Scanning, scan_part

    def job(path, i):
        scan_part(ScanJob(index=i, task=tasks(path)[0], work_dir=work,
                          settings=Scanning(num_perm=128, ngram=5, text_field="text", id_field="id", bands=16, rows=8)))
else:
    from pretrainkit.dataprep.tokenize.corpus import EncodeJob, encode_part
    from pretrainkit.shards.tokenizer import load_tokenizer
    t = load_tokenizer(tok)

    def job(path, i):
        encode_part(EncodeJob(i, tasks(path), work, str(t.path), t.sha256, None, "<u2", "text", "id"))

job(small, 0)  # the worker's steady state: modules, hash tables, tokenizer caches, allocator pools
base = kb("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM restarts from the current resident size
job(doc, 1)
print(json.dumps({"growth_bytes": (kb("VmHWM:") - base) * 1024}))
"""


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> dict:
    data = need_data(DATA / "wikitext2")
    root = tmp_path_factory.mktemp("large")
    text = write_document(root / "doc.jsonl", DOCUMENT_MB)  # + one small document after it
    small = [p for p in (data / "test.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()][:2000]
    medium = need_data(DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    with open(root / "small.jsonl", "w", encoding="utf-8") as f:  # the warm-up: short documents and one of 1.1 MB
        f.writelines(
            json.dumps({"id": f"s{i}", "text": p}, ensure_ascii=False) + "\n" for i, p in enumerate(small + [medium])
        )
    train_tokenizer(small, 1024).save(str(root / "tok.json"))
    return {"root": root, "text": text, "bytes": len(text.encode("utf-8"))}


def _worker(large: dict, mode: str) -> tuple[int, Path]:
    work = large["root"] / mode
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    root = large["root"]
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _WORKER,
            mode,
            str(root / "doc.jsonl"),
            str(root / "small.jsonl"),
            str(work),
            str(root / "tok.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)["growth_bytes"], work


def test_dedup_scan_of_a_large_document_is_bounded_and_equals_the_whole_computation(large):
    growth, work = _worker(large, "dedup")
    assert growth < MULTIPLE * large["bytes"], f"peak grew {growth / large['bytes']:.2f}x the document"
    text = large["text"]
    assert len(text) > 1 << 20  # hashed from pieces of its normalized text, in pieces of shingles
    whole = MinHasher(large_bytes=1 << 40, piece_bytes=1 << 40).signatures_of_normalized([near_normal_bytes(text)])
    counts = np.fromfile(work / "parts" / "part-00001.counts", dtype=np.uint32)
    shingles = np.fromfile(work / "parts" / "part-00001.shingles", dtype=np.uint32)
    bands = np.fromfile(work / "parts" / "part-00001.bands", dtype=np.uint64).reshape(2, 16)
    np.testing.assert_array_equal(bands[0], band_hashes(whole.signatures, 16, 8)[0])
    np.testing.assert_array_equal(shingles[: counts[0]], whole.shingles)
    assert (
        np.fromfile(work / "parts" / "part-00001.exact", dtype=np.uint8)[:16].tobytes()
        == hashlib.blake2b(unicodedata.normalize("NFC", text).strip().encode("utf-8"), digest_size=16).digest()
    )


def test_tokenize_of_a_large_document_is_bounded_and_gives_the_whole_documents_tokens(large):
    growth, work = _worker(large, "tokenize")
    assert growth < MULTIPLE * large["bytes"], f"peak grew {growth / large['bytes']:.2f}x the document"
    tokenizer = load_tokenizer(str(large["root"] / "tok.json")).tokenizer
    lengths = np.fromfile(work / "encoded-00001.lengths", dtype=np.uint32)
    tokens = np.fromfile(work / "encoded-00001.tokens", dtype=np.uint16)
    whole = tokenizer.encode(large["text"], add_special_tokens=False).ids
    assert lengths[0] == len(whole) > 1 << 20
    np.testing.assert_array_equal(tokens[: lengths[0]], whole)
