"""`--executor ray`: the same jobs as Ray tasks on a local 2-CPU Ray instance (one for the module),
byte-identical outputs, a killed Ray worker retried, a killed driver resumed, the same one-line errors."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# Ray binds the instance it starts to the machine's network address unless told this; the tests
# (and the drivers they start) stay on the loopback interface.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402  (a dev dependency: these tests fail, not skip, without it)

from pretrainkit.cli import main  # noqa: E402
from pretrainkit.dataprep.dedup.pipeline import DedupOptions, run_dedup  # noqa: E402
from pretrainkit.dataprep.executors.local import LocalRunner  # noqa: E402
from pretrainkit.dataprep.executors.ray import RayRunner  # noqa: E402
from pretrainkit.dataprep.filter.pipeline import FilterOptions  # noqa: E402
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, read_filters  # noqa: E402
from pretrainkit.dataprep.paragraphs.pipeline import ParagraphOptions  # noqa: E402
from pretrainkit.dataprep.prepare.run import run_prepare  # noqa: E402
from pretrainkit.dataprep.prepare.stages import Stage  # noqa: E402
from pretrainkit.dataprep.tokenize.corpus import Tokenize, TokenizeOptions, tokenize_corpus  # noqa: E402
from pretrainkit.errors import UserError  # noqa: E402
from pretrainkit.shards.tokenizer import train_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.ray_in_process


@pytest.fixture(scope="module")
def ray_address(process_table):
    """One local Ray instance for the module: 2 CPUs, no dashboard, a small object store; none of
    its processes may outlive it."""

    def descendants() -> set[int]:
        procs = process_table()
        found, frontier = set(), {os.getpid()}
        while frontier:
            frontier = {pid for pid, (ppid, _) in procs.items() if ppid in frontier} - found
            found |= frontier
        return found

    before = descendants()  # children of this process that are not Ray's (a loader's forkserver)
    context = ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=96 << 20,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    started = descendants() - before  # the instance's servers, agents and workers
    yield context.address_info["gcs_address"]
    ray.shutdown()
    deadline = time.monotonic() + 120  # Ray's agents exit on their own schedule after the raylet
    while (left := started & set(process_table())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left behind: {sorted(left)}"


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, reuters_docs) -> Path:
    """3000 Reuters articles in 6 files, each doubled (exact and near duplicates): 6 jobs per stage for 2 CPUs."""
    from fixtures.corpora import write_jsonl

    inputs = tmp_path_factory.mktemp("ray-corpus") / "in"
    for i in range(6):
        docs = reuters_docs[:3000][i::6]
        write_jsonl(docs + [(f"{doc_id}-copy", text) for doc_id, text in docs], inputs / f"part{i}.jsonl")
    return inputs


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, reuters_docs) -> str:
    path = tmp_path_factory.mktemp("ray-tok") / "tok.json"
    train_tokenizer([text for _, text in reuters_docs[:500]], 1024).save(str(path))
    return str(path)


@pytest.mark.slow
def test_dedup_tokenize_prepare_byte_identical_to_local(tmp_path, ray_address, corpus, tokenizer):
    options = TokenizeOptions(shard_tokens=20_000, batch_tokens=2048)
    stages = [  # a pipeline of every stage that reads JSONL
        Stage("filter", FilterOptions(tuple(read_filters(DEFAULT_FILTERS)))),
        Stage("paragraphs", ParagraphOptions(min_length=100)),
        Stage("dedup", DedupOptions()),
        Stage("tokenize", Tokenize(tokenizer, options)),
    ]
    with LocalRunner(2) as runner:
        run_dedup([str(corpus)], tmp_path / "dedup-local", DedupOptions(), runner)
        run_prepare([str(corpus)], tmp_path / "prep-local", stages, runner)
    tokenize_corpus([str(corpus)], tmp_path / "tok-local", tokenizer, options, workers=2)
    assert len(list((tmp_path / "tok-local").glob("shard-*"))) > 4
    for workers in (1, 3):
        with RayRunner(workers) as runner:
            run_dedup([str(corpus)], tmp_path / f"dedup-ray{workers}", DedupOptions(), runner=runner)
            tokenize_corpus([str(corpus)], tmp_path / f"tok-ray{workers}", tokenizer, options, runner=runner)
            run_prepare([str(corpus)], tmp_path / f"prep-ray{workers}", stages, runner)
        for stage in ("dedup", "tok", "prep"):
            assert snapshot(tmp_path / f"{stage}-ray{workers}") == snapshot(tmp_path / f"{stage}-local"), (
                stage,
                workers,
            )


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pretrainkit.cli", *args]


def test_cli_on_a_running_cluster_matches_local(tmp_path, ray_address, corpus, tokenizer):
    common = ["tokenize", str(corpus), "--tokenizer", tokenizer, "--shard-size", "20K", "--format", "webdataset"]
    local = subprocess.run(_cli(*common, "-o", str(tmp_path / "local")), capture_output=True, text=True)
    remote = subprocess.run(
        _cli(*common, "-o", str(tmp_path / "ray"), "--executor", "ray", "--ray-address", ray_address),
        capture_output=True,
        text=True,
    )
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    assert remote.stdout.replace("/ray", "/local") == local.stdout  # the same summary
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")


def test_a_killed_ray_worker_is_retried_and_the_output_is_identical(tmp_path, ray_address, corpus, process_table):
    with LocalRunner(1) as runner:
        run_dedup([str(corpus)], tmp_path / "local", DedupOptions(), runner)
    killed: list[int] = []

    def kill_one_scan_task() -> None:
        deadline = time.monotonic() + 120
        while not killed and time.monotonic() < deadline:
            for pid, (_, title) in process_table().items():
                if title == "ray::ptk scan":  # a Ray worker while it runs a scan job
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.002)

    killer = threading.Thread(target=kill_one_scan_task)
    killer.start()
    with RayRunner(2) as runner:
        run_dedup([str(corpus)], tmp_path / "ray", DedupOptions(), runner=runner)
    killer.join()
    assert killed, "no scan task was seen running"
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")


def test_a_killed_driver_resumes_from_the_finished_jobs(tmp_path, ray_address, corpus):
    with LocalRunner(1) as runner:
        run_dedup([str(corpus)], tmp_path / "local", DedupOptions(), runner)
    out = tmp_path / "ray"
    command = _cli("dedup", str(corpus), "-o", str(out), "--executor", "ray", "--ray-address", ray_address)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    scans = out / ".work" / "parts"  # a run's scan parts; the finished index is written from them at the end
    while not list(scans.glob("part-*.json")) and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "stats.json").exists(), "the run finished before the kill"
    finished = {p.with_suffix(".bands"): p.with_suffix(".bands").stat().st_ino for p in scans.glob("part-*.json")}
    assert 0 < len(finished) < 6
    rerun = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []  # the finished scans' files while the rerun works (they go with its work directory at the end)
    while rerun.poll() is None:
        with contextlib.suppress(FileNotFoundError):
            seen.append({p: p.stat().st_ino for p in finished})
        time.sleep(0.005)
    assert rerun.returncode == 0, rerun.stderr.read()
    assert seen and all(s == finished for s in seen)  # finished scans were not redone
    assert snapshot(out) == snapshot(tmp_path / "local")


def test_a_bad_input_is_the_same_one_line_error_as_locally(tmp_path, ray_address, corpus):
    bad = tmp_path / "in"
    bad.mkdir()
    (bad / "a.jsonl").write_bytes((corpus / "part0.jsonl").read_bytes())
    (bad / "b.parquet").write_bytes(b"PAR1 this is not parquet")  # fails inside its scan job
    errors = []
    for extra in ([], ["--executor", "ray", "--ray-address", ray_address]):
        r = subprocess.run(_cli("dedup", str(bad), "-o", str(tmp_path / "out"), *extra), capture_output=True, text=True)
        assert r.returncode == 2
        errors.append(r.stderr.strip())
    assert errors[0] == errors[1]
    assert errors[0].startswith("ptk: error: ") and "b.parquet" in errors[0] and "\n" not in errors[0]


def test_paths_a_node_cannot_see_are_named(tmp_path, ray_address):
    with RayRunner(2) as runner:
        runner.check_paths([str(ROOT / "README.md")], tmp_path / "out")  # all visible: no error
        with pytest.raises(UserError, match=r"missing\.jsonl: not found on Ray node .*every node mounts"):
            runner.check_paths([str(tmp_path / "missing.jsonl")], tmp_path / "out")
    assert not list((tmp_path / "out").iterdir())  # the probe files are gone


def test_without_ray_installed_the_error_says_what_to_install(tmp_path, monkeypatch, capsys, corpus):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    assert main(["dedup", str(corpus), "-o", str(tmp_path / "out"), "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "ptk: error: --executor ray needs Ray, which is not installed: pip install 'pretrainkit[ray]'"


def test_sigterm_to_the_driver_is_one_line_and_the_same_command_resumes(tmp_path, ray_address, corpus):
    """ray.init installs a SIGTERM handler that exits with status 15 and says nothing: ptk's is put back."""
    with LocalRunner(1) as runner:
        run_dedup([str(corpus)], tmp_path / "local", DedupOptions(), runner)
    out = tmp_path / "ray"
    command = _cli("dedup", str(corpus), "-o", str(out), "--executor", "ray", "--ray-address", ray_address)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((out / ".work" / "parts").glob("part-*.json")) and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert err.splitlines() == ["ptk dedup: stopped by SIGTERM; the same command resumes"]
    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot(out) == snapshot(tmp_path / "local")


def test_extract_on_ray_is_byte_identical_to_local(tmp_path, ray_address):
    from fixtures.warc import write_crawl
    from pretrainkit.dataprep.extract.pipeline import run_extract
    from pretrainkit.output_folders import EXTRACT, output_folder

    crawl = write_crawl(tmp_path / "crawl")
    for name, runner in (("local", LocalRunner(2)), ("ray", RayRunner(2))):
        with output_folder(tmp_path / name, EXTRACT), runner:
            run_extract([str(crawl)], tmp_path / name, runner)
    assert len(list((tmp_path / "ray").glob("part-*.jsonl.zst"))) == 3
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")


def test_decontaminate_byte_identical_to_local(tmp_path, ray_address, corpus, reuters_docs):
    from pretrainkit.dataprep.decontaminate.pipeline import DecontaminateOptions, run_decontaminate

    evals = tmp_path / "evals.jsonl"
    evals.write_text("".join(json.dumps({"id": i, "text": t[:300]}) + "\n" for i, t in reuters_docs[:3000:100]))
    options = DecontaminateOptions(eval_files=(str(evals),))
    with LocalRunner(2) as runner:
        local = run_decontaminate([str(corpus)], tmp_path / "local", options, runner)
    with RayRunner(2) as runner:
        run_decontaminate([str(corpus)], tmp_path / "ray", options, runner)
    assert local["contaminated_docs"] > 0
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")


def test_filter_on_ray_is_byte_identical_to_local(tmp_path, ray_address, corpus):
    from pretrainkit.dataprep.filter.pipeline import FilterOptions, run_filter
    from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, read_filters

    options = FilterOptions(tuple(read_filters(DEFAULT_FILTERS)))  # language ID too
    with LocalRunner(2) as runner:
        local = run_filter([str(corpus)], tmp_path / "local", options, runner)
    with RayRunner(2) as runner:
        run_filter([str(corpus)], tmp_path / "ray", options, runner)
    assert local["removed_docs"] > 0 and local["kept_docs"] > 0
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")


def test_paragraph_dedup_on_ray_is_byte_identical_to_local(tmp_path, ray_address, corpus):
    from pretrainkit.dataprep.paragraphs.pipeline import ParagraphOptions, run_paragraphs

    with LocalRunner(2) as runner:
        local = run_paragraphs([str(corpus)], tmp_path / "local", ParagraphOptions(), runner)
    with RayRunner(2) as runner:
        run_paragraphs([str(corpus)], tmp_path / "ray", ParagraphOptions(), runner)
    assert local["paragraphs_removed"] > 0 and local["removed_docs"] > 0
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")
