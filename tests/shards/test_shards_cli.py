"""`ptk shards verify` / `ptk shards inspect` on real text shards."""

from __future__ import annotations

import pytest

from pretrainkit.cli import main
from pretrainkit.shards import write_shards


@pytest.fixture()
def shard_dir(tmp_path, wikitext_docs):
    return write_shards(
        wikitext_docs, tmp_path / "s", vocab_size=257, eos_id=256, shard_tokens=100_000, fmt="webdataset"
    ).path


def test_verify_exits_1_naming_each_bad_file(shard_dir, capsys):
    assert main(["shards", "verify", str(shard_dir)]) == 0
    assert capsys.readouterr().out.startswith("OK: ")
    first = shard_dir / "shard-00000.tar"
    size = first.stat().st_size
    first.write_bytes(first.read_bytes()[:-512])
    third = shard_dir / "shard-00002.tar"
    data = bytearray(third.read_bytes())
    data[1000] ^= 0x80
    third.write_bytes(bytes(data))
    assert main(["shards", "verify", str(shard_dir)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(f"shard-00000.tar: truncated: {size - 512} bytes, manifest says {size}")
    assert out[1].endswith("shard-00002.tar: altered: sha256 differs from the manifest")
    assert out[2].startswith("FAILED: 2 problems with the")


def test_verify_names_the_manifest_without_a_doubled_slash(shard_dir, capsys):
    assert main(["shards", "verify", f"{shard_dir}/"]) == 0
    out = capsys.readouterr().out
    assert f"tokens match {shard_dir}/manifest.json (fingerprint" in out and "//" not in out
    (shard_dir / "shard-00001.tar").unlink()
    assert main(["shards", "verify", f"{shard_dir}//"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{shard_dir}/shard-00001.tar: missing") and "//" not in out


def test_inspect_reports_counts_histogram_and_samples(shard_dir, wikitext_docs, capsys):
    assert main(["shards", "inspect", str(shard_dir), "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{len(wikitext_docs)} documents, {sum(map(len, wikitext_docs))} tokens" in out
    assert "document length (tokens): min" in out and "#" in out
    first = " ".join(str(t) for t in wikitext_docs[0][:24])
    assert f"[0] id '0', {len(wikitext_docs[0])} tokens: {first}" in out


def test_inspect_refuses_another_tokenizer_and_missing_sets(shard_dir, tmp_path, capsys):
    (tmp_path / "other.json").write_text("{}")
    assert main(["shards", "inspect", str(shard_dir), "--tokenizer", str(tmp_path / "other.json")]) == 2
    assert "other.json: not the tokenizer of" in capsys.readouterr().err
    assert main(["shards", "verify", str(tmp_path)]) == 2
    assert "manifest.json: missing" in capsys.readouterr().err
