"""`run_dir: s3://...` (a real S3 server on the loopback): the run trains in a local mirror pushed to the
bucket after every checkpoint; it resumes on this machine and on another (an empty work folder) to the
losses and weights of the same run on a local run_dir, also after kill -9 in a checkpoint; `ptk export`,
`eval` and `report` read it from the bucket."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pretrainkit.cli import main
from pretrainkit.remote import staging
from pretrainkit.remote.limits import RETRIES_ENV
from pretrainkit.remote.transfer import upload

RUN = {"max_steps": 8, "checkpoint": {"every": 2, "keep": 2}, "eval": {"every": 4, "batches": 1}}
TIMING = ("tokens_per_s", "mfu", "val_seconds")  # what differs between any two runs


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(staging.WORK_DIR_ENV, str(tmp_path / "work"))
    return tmp_path / "work"


def logged(rows: list[dict]) -> list[dict]:
    """A run's metrics rows less the timings, which differ between any two runs."""
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def bucket_rows(kit, s3, prefix: str) -> list[dict]:
    text = kit.objects(s3, prefix)["metrics.jsonl"].decode()
    return [json.loads(line) for line in text.splitlines()]


def local_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(files: dict[str, bytes], step: int) -> dict[str, bytes]:
    """The DCP files of one checkpoint (the model's and optimizer's tensors), by name."""
    prefix = f"checkpoints/step-{step:07d}/"
    return {k[len(prefix) :]: v for k, v in files.items() if k.startswith(prefix) and "distcp" in k}


def train_in_steps(config: Path, between=lambda: None) -> None:
    """`ptk train` to step 4, 6, then 8 (the schedule follows max_steps: each leg as the reference's),
    `between` after the second leg."""
    assert main(["train", str(config), "--set", "max_steps=4"]) == 0
    assert main(["train", str(config), "--set", "max_steps=6"]) == 0
    between()
    assert main(["train", str(config)]) == 0


@pytest.fixture(scope="module")
def local_run(session_kit, tmp_path_factory) -> Path:
    """The reference: the same run on a local run_dir."""
    config = session_kit.config(tmp_path_factory.mktemp("local-run"), **RUN)
    train_in_steps(config)
    return config.parent / "run"


def test_a_run_in_a_bucket_resumes_here_and_elsewhere_like_a_local_run(kit, s3, work, local_run, tmp_path, capsys):
    url = f"{s3.bucket}/runs/a"
    config = kit.config(tmp_path, **RUN, run_dir=url)
    seen = []

    def elsewhere() -> None:
        seen.append((capsys.readouterr().err, kit.whole_checkpoints(kit.objects(s3, url))))
        shutil.rmtree(work)  # another machine: the third leg resumes from the bucket, the second from the mirror

    train_in_steps(config, elsewhere)
    err, checkpoints = seen[0]
    assert f"run dir: {url} " in err and str(work) not in err
    assert checkpoints == ["step-0000004", "step-0000006"]
    files = kit.objects(s3, url)
    assert kit.whole_checkpoints(files) == ["step-0000006", "step-0000008"]
    assert not [k for k in files if ".tmp" in k or "lock" in k]
    assert logged(bucket_rows(kit, s3, url)) == logged(local_rows(local_run))
    local = {p.relative_to(local_run).as_posix(): p.read_bytes() for p in local_run.rglob("*") if p.is_file()}
    assert weights(files, 8) == weights(local, 8) and weights(files, 8)
    saved = yaml.safe_load(files["config.yaml"])
    assert saved["run_dir"] == url and saved["max_steps"] == 8

    # The run deleted from the bucket: this machine's mirror of it does not bring it back.
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    s3.client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"{prefix}/{k}"} for k in files]})
    capsys.readouterr()
    assert main(["train", str(config), "--set", "max_steps=2"]) == 0
    assert f"ptk train: note: {url} holds no run now; the run starts over" in capsys.readouterr().err
    assert kit.whole_checkpoints(kit.objects(s3, url)) == ["step-0000002"]
    assert [row["step"] for row in bucket_rows(kit, s3, url) if "loss" in row] == [1, 2]


def saving_from(work: Path, step: int) -> bool:
    """Whether the mirror holds a checkpoint of `step` or later being written."""
    written = (p.parent.name for p in work.glob("outputs/*/checkpoints/.tmp-step-*/*"))
    return any(int(name.rsplit("-", 1)[1]) >= step for name in written)


def test_kill_9_in_a_checkpoint_then_the_same_command_elsewhere_resumes_like_a_local_run(
    kit, s3, work, tmp_path
) -> None:
    straight = {**RUN, "max_steps": 16}
    reference = kit.config(tmp_path / "local", **straight)
    assert kit.ptk(reference, nproc=2).returncode == 0
    url = f"{s3.bucket}/runs/killed"
    config = kit.config(tmp_path / "bucket", **straight, run_dir=url)
    victim = kit.start(kit.ptk_command(config, nproc=2), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while victim.poll() is None and not saving_from(work, step=8):
            time.sleep(0.005)
    finally:
        kit.kill_processes(str(config))  # ptk, torchrun and both workers, at once
    victim.wait()
    assert victim.returncode == -signal.SIGKILL, victim.stderr.read()[-3000:]
    kit.whole_checkpoints(kit.objects(s3, url))  # what the bucket holds after the kill is whole or absent
    shutil.rmtree(work)  # the same command on another machine
    resumed = kit.ptk(config, nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    files = kit.objects(s3, url)
    assert kit.whole_checkpoints(files) == ["step-0000014", "step-0000016"]
    local_run = reference.parent / "run"
    assert logged(bucket_rows(kit, s3, url)) == logged(local_rows(local_run))
    local = {p.relative_to(local_run).as_posix(): p.read_bytes() for p in local_run.rglob("*") if p.is_file()}
    assert weights(files, 16) == weights(local, 16)


def test_export_eval_and_report_read_a_run_in_a_bucket_as_a_local_one(kit, s3, work, tmp_path, capsys) -> None:
    url = f"{s3.bucket}/runs/read"
    local_config = kit.config(tmp_path / "local", **RUN)
    bucket_config = kit.config(tmp_path / "bucket", **RUN, run_dir=url)
    for config in (local_config, bucket_config):
        assert main(["train", str(config), "--set", "max_steps=4"]) == 0
    shutil.rmtree(work)
    local_run = local_config.parent / "run"
    capsys.readouterr()

    assert main(["export", url, "-o", f"{s3.bucket}/models/read"]) == 0
    assert main(["export", str(local_run), "-o", str(tmp_path / "model")]) == 0
    exported = kit.objects(s3, f"{s3.bucket}/models/read")
    assert exported["model.safetensors"] == (tmp_path / "model" / "model.safetensors").read_bytes()
    out = capsys.readouterr().out
    assert f"of {url} " in out and f"-> {s3.bucket}/models/read/model.safetensors" in out and str(work) not in out

    scores = []
    for model in (url, str(local_run)):
        assert main(["eval", model, "--mixture", str(kit.mixture), "--json"]) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert scores[0]["sources"] == scores[1]["sources"]

    assert main(["report", url]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ptk: error: {url}: a run in a bucket is reported into a local file: give -o REPORT.png"
    )
    assert main(["report", url, "-o", str(tmp_path / "report.png")]) == 0
    assert (tmp_path / "report.png").stat().st_size > 0 and f"{url}" in (tmp_path / "report.txt").read_text()
    assert not list((work / "inputs").rglob("*.distcp"))  # the fetched copies go when each command ends

    capsys.readouterr()
    traces = []
    for run in (url, str(local_run)):
        assert main(["trace", run, "--step", "3", "--json"]) == 0
        traces.append(json.loads(capsys.readouterr().out))
    step_3 = next(r for r in local_rows(local_run) if r["step"] == 3 and "loss" in r)
    assert traces[0] == traces[1] and traces[0]["batch_sha256"] == step_3["batch_sha256"]


def test_a_run_dir_url_over_other_objects_or_a_bad_export_url_is_one_line(kit, s3, work, tmp_path, capsys) -> None:
    s3.client().put_object(Bucket=s3.bucket.removeprefix("s3://"), Key="taken/notes.txt", Body=b"mine")
    config = kit.config(tmp_path, **RUN, run_dir=f"{s3.bucket}/taken")
    assert main(["train", str(config)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ptk: error: {s3.bucket}/taken: holds objects of no ptk output (notes.txt); "
        "write into an empty prefix or an earlier run's output"
    )
    with pytest.raises(SystemExit) as exited:
        main(["export", str(tmp_path), "-o", f"{s3.bucket}/m.safetensors"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"ptk export: error: argument -o/--output: {s3.bucket}/m.safetensors: a URL output is a folder (it gets "
        "model.safetensors); drop the .safetensors name (see ptk export --help)"
    )


def test_a_bucket_gone_mid_run_stops_the_run_in_one_line_naming_it(kit, tmp_path, work, monkeypatch) -> None:
    import s3fs

    from fixtures.s3_server import s3_server

    with s3_server() as server:  # a server of this test's own, killed while the run goes on
        for name, value in server.environment().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv(RETRIES_ENV, "0")  # the backend's retries only make the wait longer
        s3fs.S3FileSystem.clear_instance_cache()
        url = f"{server.make_bucket('vanishing')}/runs/a"
        config = kit.config(tmp_path, **{**RUN, "max_steps": 2000}, run_dir=url)
        victim = kit.start(kit.ptk_command(config), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while victim.poll() is None and not list(work.glob("outputs/*/.pretrainkit-pushed")):
                time.sleep(0.05)
            server.stop()
            _, err = victim.communicate(timeout=kit.hang_seconds)
        finally:
            kit.kill_processes(str(config))
    s3fs.S3FileSystem.clear_instance_cache()
    assert victim.returncode == 2, err[-3000:]
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"ptk: error: {url}: cannot "), line


def test_init_from_a_run_in_a_bucket_starts_like_from_its_local_copy(kit, s3, work, tmp_path, capsys) -> None:
    base = kit.config(tmp_path / "base", **{**RUN, "max_steps": 4})
    assert main(["train", str(base)]) == 0
    url = f"{s3.bucket}/runs/base"
    for f in sorted(p for p in (tmp_path / "base" / "run").rglob("*") if p.is_file()):
        upload(f, f"{url}/{f.relative_to(tmp_path / 'base' / 'run').as_posix()}")
    runs = {}
    for name, init_from in (("from-local", str(tmp_path / "base" / "run")), ("from-bucket", url)):
        config = kit.config(tmp_path / name, **RUN, init_from=init_from)
        assert main(["train", str(config)]) == 0
        runs[name] = logged(local_rows(tmp_path / name / "run"))
    assert runs["from-bucket"] == runs["from-local"]
    assert f"initialized from {url}" in capsys.readouterr().err  # named by its URL, not the fetched copy
