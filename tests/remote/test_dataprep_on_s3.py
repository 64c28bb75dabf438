"""The dataprep commands with inputs and outputs in a bucket (a real S3 server on the loopback): the
same bytes as on local paths, published with the stats last, resumed after a kill, one-line errors."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fixtures.corpora import DATA, need_data, reuters_documents, write_jsonl
from fixtures.fault_commands import error_line, ptk_command, ptk_env, run_ptk
from fixtures.warc import response, rust_book_pages, write_warc
from pretrainkit.errors import UserError
from pretrainkit.remote import staging
from pretrainkit.remote.transfer import upload, upload_all
from pretrainkit.shards.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """1,500 Reuters articles in two files of a folder tree, with duplicates across them."""
    need_data(DATA / "reuters21578")
    docs = reuters_documents(3)[:1500]
    root = tmp_path_factory.mktemp("s3-corpus") / "corpus"
    write_jsonl(docs[:900], root / "a.jsonl")
    write_jsonl(docs[600:], root / "more" / "b.jsonl")
    return root


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("s3-tok") / "tokenizer.json"
    train_tokenizer([text for _, text in reuters_documents(1)[:300]], 512).save(str(path))
    return path


def upload_tree(local: Path, url: str) -> None:
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        upload(f, f"{url}/{f.relative_to(local).as_posix()}")


def files(folder: Path) -> dict[str, bytes]:
    """A local output's files as the bucket gets them: without the lock and the resume files."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and staging._published(p.relative_to(folder))
    }


def objects(s3, prefix: str) -> dict[str, bytes]:
    bucket = s3.bucket.removeprefix("s3://")
    return {k[len(prefix) + 1 :]: v for k, v in s3.objects(bucket).items() if k.startswith(prefix + "/")}


def ok(argv: list[str]) -> subprocess.CompletedProcess:
    result = run_ptk(argv)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(staging.WORK_DIR_ENV, str(tmp_path / "work"))
    return tmp_path / "work"


def test_dedup_and_tokenize_from_and_to_a_bucket_are_byte_identical_to_local(s3, tmp_path, work, corpus, tokenizer):
    upload_tree(corpus, f"{s3.bucket}/raw")
    upload(tokenizer, f"{s3.bucket}/tok/tokenizer.json")
    ok(["dedup", str(corpus), "-o", str(tmp_path / "dedup"), "--workers", "2"])
    ok(["tokenize", str(tmp_path / "dedup"), "-o", str(tmp_path / "shards"), "--tokenizer", str(tokenizer)])

    result = ok(["dedup", f"{s3.bucket}/raw", "-o", f"{s3.bucket}/dedup", "--workers", "2"])
    assert f"dedup -> {s3.bucket}/dedup" in result.stdout and str(work) not in result.stdout
    assert f"to {s3.bucket}/dedup" in result.stderr
    result = ok(
        [
            "tokenize",
            f"{s3.bucket}/dedup",
            "-o",
            f"{s3.bucket}/shards",
            "--tokenizer",
            f"{s3.bucket}/tok/tokenizer.json",
        ]
    )
    # Of a dedup output given as input only its kept parts are fetched (dataprep's `fetched_input_files`).
    assert f"{s3.bucket}/dedup: not fetched" in result.stderr and "index/" in result.stderr

    assert objects(s3, "dedup") == files(tmp_path / "dedup")
    assert objects(s3, "shards") == files(tmp_path / "shards")
    assert any(name.startswith("shard-") for name in objects(s3, "shards"))

    # a later corpus against the first's index, in the bucket: `--against` a URL
    later = write_jsonl(reuters_documents(3)[1200:1700], tmp_path / "later" / "c.jsonl").parent
    upload_tree(later, f"{s3.bucket}/later")
    ok(["dedup", str(later), "-o", str(tmp_path / "later-dedup"), "--against", str(tmp_path / "dedup" / "index")])
    ok(["dedup", f"{s3.bucket}/later", "-o", f"{s3.bucket}/later-dedup", "--against", f"{s3.bucket}/dedup/index"])
    got, want = objects(s3, "later-dedup"), files(tmp_path / "later-dedup")
    assert b'"against_docs": 0' not in got["stats.json"]
    for name in want:  # the same bytes but for the index's name, its URL in the bucket's run
        assert got[name].replace(f"{s3.bucket}/dedup".encode(), str(tmp_path / "dedup").encode()) == want[name]
    assert not any(work.rglob("*.jsonl*")), "the staged output and the fetched inputs are removed after success"


@pytest.mark.parametrize("command", ["filter", "extract", "prepare", "decontaminate"])
def test_every_dataprep_command_to_a_bucket(s3, tmp_path, work, corpus, tokenizer, command):
    """The same bytes as on local paths; a file an option names (the tokenizer, an evaluation set) is
    fetched from its URL and named by it in the outputs."""
    source, options, given = corpus, [], None
    if command == "extract":
        source = tmp_path / "crawl"
        source.mkdir()
        write_warc(source / "crawl.warc.gz", [response(url, html) for url, html in rust_book_pages(8)])
    if command == "prepare":
        given = tokenizer
        options = ["--tokenizer", "--shard-size", "20000"]
    if command == "decontaminate":
        given = write_jsonl(reuters_documents(3)[100:110], tmp_path / "evals.jsonl")
        options = ["--eval"]
    upload_tree(source, f"{s3.bucket}/in")
    if given:
        upload(given, f"{s3.bucket}/{given.name}")
        options.insert(1, str(given))
    ok([command, str(source), "-o", str(tmp_path / "local"), *options])
    if given:
        options[1] = f"{s3.bucket}/{given.name}"
    ok([command, f"{s3.bucket}/in", "-o", f"{s3.bucket}/out", *options])
    got, want = objects(s3, "out"), files(tmp_path / "local")
    for name in got if given else []:  # the outputs name the file as given: by its URL
        if str(given).encode() in want[name]:
            assert options[1].encode() in got[name], name
            got[name] = got[name].replace(options[1].encode(), str(given).encode())
    assert got == want


def test_publication_cut_short_leaves_no_stats_and_the_rerun_completes_it(s3, tmp_path, work, corpus, monkeypatch):
    """A reader never sees a stats.json without every file it counts: it is published last, and the
    bucket's old one is deleted before a new run's files replace what it counted."""
    ok(["dedup", str(corpus), "-o", str(tmp_path / "local")])
    local = files(tmp_path / "local")
    folder = tmp_path / "staged"
    subprocess.run(["cp", "-r", str(tmp_path / "local"), str(folder)], check=True)

    def cut_short(files, where):  # the connection lost after 5 of the batch's files
        upload_all(files[:5], where)
        raise UserError(f"{where}: cannot write: the connection was cut")

    monkeypatch.setattr(staging, "upload_all", cut_short)
    with pytest.raises(UserError, match="connection was cut"):
        staging.publish(folder, f"{s3.bucket}/out")
    partial = objects(s3, "out")
    assert len(partial) == 5 and "stats.json" not in partial
    monkeypatch.setattr(staging, "upload_all", upload_all)
    staging.publish(folder, f"{s3.bucket}/out")
    assert objects(s3, "out") == local


@pytest.mark.parametrize("moment", ["running", "publishing"])
def test_kill_9_then_the_same_command_gives_the_same_bytes(s3, tmp_path, work, corpus, moment):
    """Killed while the command runs (it resumes from its staging folder) or while it publishes (no
    stats.json is there yet; everything is published again)."""
    upload_tree(corpus, f"{s3.bucket}/raw")
    ok(["dedup", str(corpus), "-o", str(tmp_path / "local")])
    # The kill must land before stats.json is published; on a loaded machine the five small objects
    # can all be published between a poll and the kill: that try proves nothing, so another output is tried.
    for attempt in range(5):
        out = f"out-{attempt}"
        argv = ["dedup", f"{s3.bucket}/raw", "-o", f"{s3.bucket}/{out}"]

        def reached(out: str = out) -> bool:
            if moment == "running":  # a stage's part files are in the staging folder
                return any((work / "outputs").glob("*/.work/*/*"))
            return any(k.startswith(f"{out}/") for k in s3.keys(s3.bucket[5:]))

        process = subprocess.Popen(ptk_command(argv), env=ptk_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            while process.poll() is None and not reached():
                time.sleep(0.005)
            process.send_signal(signal.SIGKILL)
        finally:
            process.wait(60)
        if process.returncode == -signal.SIGKILL and "stats.json" not in objects(s3, out):
            break
        shutil.rmtree(work / "outputs", ignore_errors=True)
    else:
        pytest.fail(f"in 5 tries, the run was never killed before it finished {moment}")
    if moment == "running":
        assert not objects(s3, out) and any((work / "outputs").glob("*/.work"))
    ok(argv)
    assert objects(s3, out) == files(tmp_path / "local")


def test_a_prefix_of_another_command_or_of_other_objects_is_refused(s3, tmp_path, work, corpus, tokenizer):
    upload_tree(corpus, f"{s3.bucket}/raw")
    ok(["dedup", f"{s3.bucket}/raw", "-o", f"{s3.bucket}/dedup"])
    result = run_ptk(["tokenize", f"{s3.bucket}/raw", "-o", f"{s3.bucket}/dedup", "--tokenizer", str(tokenizer)])
    assert result.returncode == 2
    line = error_line(result.stderr)
    assert f"{s3.bucket}/dedup: holds a ptk dedup output" in line and str(work) not in line
    result = run_ptk(["dedup", str(corpus), "-o", f"{s3.bucket}/raw"])
    assert result.returncode == 2
    assert f"{s3.bucket}/raw: holds objects of no ptk output (a.jsonl, more/b.jsonl)" in error_line(result.stderr)
    result = run_ptk(["dedup", f"{s3.bucket}/raw", "-o", s3.bucket])
    assert f"{s3.bucket}/raw: input lies inside the output directory {s3.bucket}" in error_line(result.stderr)


def test_an_input_changed_in_the_bucket_at_the_same_size_is_fetched_again(s3, tmp_path, work, corpus):
    """A failed run leaves its fetched inputs for the rerun; one whose object has changed since (same size,
    new content) is fetched again, not taken as it is."""
    upload_tree(corpus, f"{s3.bucket}/raw")
    upload(corpus / "a.jsonl", f"{s3.bucket}/out/someone-elses.jsonl")
    result = run_ptk(["dedup", f"{s3.bucket}/raw", "-o", f"{s3.bucket}/out"])
    assert result.returncode == 2 and "holds objects of no ptk output" in error_line(result.stderr)
    assert any(work.rglob("a.jsonl")), "the failed run's fetched inputs are kept"

    changed = tmp_path / "changed"
    shutil.copytree(corpus, changed)
    text = (changed / "a.jsonl").read_text()
    (changed / "a.jsonl").write_text(text.replace("a", "e"))  # the same size, other text
    assert (changed / "a.jsonl").stat().st_size == (corpus / "a.jsonl").stat().st_size
    upload(changed / "a.jsonl", f"{s3.bucket}/raw/a.jsonl")
    s3.client().delete_object(Bucket=s3.bucket.removeprefix("s3://"), Key="out/someone-elses.jsonl")
    ok(["dedup", f"{s3.bucket}/raw", "-o", f"{s3.bucket}/out"])
    ok(["dedup", str(changed), "-o", str(tmp_path / "local")])
    assert objects(s3, "out") == files(tmp_path / "local")


def test_storage_errors_are_one_line_naming_the_url(s3, tmp_path, work, corpus, monkeypatch):
    cases = [
        (["dedup", f"{s3.bucket}/nothing-here", "-o", str(tmp_path / "o")], f"{s3.bucket}/nothing-here: no such file"),
        (
            ["dedup", str(corpus), "-o", "s3://no-such-bucket/out"],
            "s3://no-such-bucket/out: cannot list: no such bucket",
        ),
        (["dedup", str(corpus), "-o", "hf://datasets/a/b"], "hf://datasets/a/b: hf:// is read-only here"),
        (["dedup", str(corpus), "-o", "ftp://host/out"], "ftp://host/out: unsupported URL scheme ftp://"),
    ]
    for argv, expected in cases:
        result = run_ptk(argv)
        assert result.returncode == 2 and expected in error_line(result.stderr), (argv, result.stderr[-2000:])
    for name, value in s3.environment("AKIAWRONGKEY", "wrong").items():
        monkeypatch.setenv(name, value)
    result = run_ptk(["dedup", str(corpus), "-o", f"{s3.bucket}/out"])
    assert result.returncode == 2
    assert f"{s3.bucket}/out: cannot list: access denied" in error_line(result.stderr)


def test_a_pipeline_file_in_a_bucket_names_its_files_relative_to_its_prefix(s3, tmp_path, work, corpus, tokenizer):
    """`ptk prepare --pipeline s3://.../pipeline.yaml`: the tokenizer and evaluation set it names by
    relative paths are fetched from beside it (`..` too), and a filters file from its URL."""
    config = tmp_path / "config"
    config.mkdir()
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    write_jsonl(reuters_documents(3)[100:110], config / "evals.jsonl")
    (config / "filters.yaml").write_text("filters:\n  - min_length: {min_chars: 200}\n  - pii\n")
    (config / "pipeline.yaml").write_text(
        "stages:\n"
        "  - filter: {filters: filters.yaml}\n"
        "  - dedup\n"
        "  - decontaminate: {eval: [evals.jsonl]}\n"
        "  - tokenize: {tokenizer: ../tok/tokenizer.json, shard_size: 20000}\n"
    )
    upload_tree(config, f"{s3.bucket}/config")
    upload_tree(tmp_path / "tok", f"{s3.bucket}/tok")
    upload_tree(corpus, f"{s3.bucket}/in")
    ok(["prepare", str(corpus), "--pipeline", str(config / "pipeline.yaml"), "-o", str(tmp_path / "local")])
    ok(["prepare", f"{s3.bucket}/in", "--pipeline", f"{s3.bucket}/config/pipeline.yaml", "-o", f"{s3.bucket}/out"])
    got, want = objects(s3, "out"), files(tmp_path / "local")
    assert sorted(got) == sorted(want)
    for name in want:  # the same bytes but for the files' names: the URLs in the bucket's run
        named = got[name].replace(f"{s3.bucket}/tok".encode(), f"{config}/../tok".encode())
        assert named.replace(f"{s3.bucket}/config".encode(), str(config).encode()) == want[name], name
    assert f"{s3.bucket}/config/evals.jsonl".encode() in got["decontaminate/contaminated.jsonl"]


def test_a_classifier_in_a_bucket_scores_and_filters_as_its_local_copy(s3, tmp_path, work, corpus):
    """`ptk score --classifier s3://...` and a filters file's `classifier: {model: s3://...}`: the model
    is fetched and the outputs are the bytes its local copy gives."""
    docs = reuters_documents(3)
    write_jsonl(docs[:150], tmp_path / "pos" / "a.jsonl")
    write_jsonl(docs[1600:1750], tmp_path / "neg" / "a.jsonl")
    model = tmp_path / "model.bin"
    positive, negative = str(tmp_path / "pos"), str(tmp_path / "neg")
    ok(["classifier", "train", "--positive", positive, "--negative", negative, "-o", str(model), "--bucket", "1000"])
    upload(model, f"{s3.bucket}/models/model.bin")
    for where, given in (("local", str(model)), ("bucket", f"{s3.bucket}/models/model.bin")):
        (tmp_path / f"{where}.yaml").write_text(
            f"filters:\n  - classifier: {{model: {given}, label: positive, min_score: 0.5}}\n"
        )
        score = ["score", str(corpus), "-o", str(tmp_path / where / "scored"), "--classifier", given]
        ok([*score, "--label", "positive", "--name", "model"])
        ok(["filter", str(corpus), "-o", str(tmp_path / where / "kept"), "--filters", str(tmp_path / f"{where}.yaml")])
    for stage in ("scored", "kept"):
        got, want = files(tmp_path / "bucket" / stage), files(tmp_path / "local" / stage)
        assert f"{s3.bucket}/models/model.bin".encode() in got["stats.json"], "the model named by its URL"
        got["stats.json"] = got["stats.json"].replace(f"{s3.bucket}/models/model.bin".encode(), str(model).encode())
        assert got == want, stage
