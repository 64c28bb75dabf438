"""`ptk report` refuses what it cannot draw truthfully: an output suffix other than .png, and a run
(or a compared run) that has logged no training step."""

from __future__ import annotations

import json
from pathlib import Path

from pretrainkit.cli import main


def write_run(run: Path, steps: int) -> Path:
    run.mkdir(parents=True)
    rows = [
        {"step": s, "loss": 5.0 - 0.1 * s, "lr": 1e-3, "grad_norm": 1.0, "tokens": 256 * s, "tokens_per_s": 1e3}
        for s in range(1, steps + 1)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_report_refuses_a_suffix_it_would_not_write(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", 5)
    for name in ("r.jpg", "r.svg", "r"):
        assert main(["report", str(run), "-o", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ptk: error: -o {tmp_path / name}: ptk report writes PNG") and len(err.splitlines()) == 1
        assert not (tmp_path / name).exists() and not (tmp_path / "r.txt").exists()
    assert main(["report", str(run), "-o", str(tmp_path / "r.PNG")]) == 0
    assert (tmp_path / "r.PNG").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_a_run_without_training_steps_is_an_error(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text('{"step": 0, "val_loss": {"web": 5.5}}\n')
    assert main(["report", str(empty)]) == 2
    assert (
        capsys.readouterr().err == f"ptk: error: {empty}/metrics.jsonl: no training steps logged; nothing to report\n"
    )
    assert not (empty / "report.png").exists()
    good = write_run(tmp_path / "good", 5)
    assert main(["report", str(good), "--compare", str(empty)]) == 2
    assert "empty/metrics.jsonl: no training steps logged" in capsys.readouterr().err


def test_a_metrics_line_that_is_not_utf8_is_one_line_naming_file_and_line(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", 5)
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"loss"', b'"lo\xffss"')  # one flipped byte in a key
    (run / "metrics.jsonl").write_bytes(b"".join(lines))
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ptk: error: {run / 'metrics.jsonl'}: line 3: not UTF-8 text") and err.count("\n") == 1
    byte = lines[2].index(b"\xff") + 1
    assert f"(byte {byte} is 0xff)" in err and not (run / "report.png").exists()


def test_a_config_that_is_not_utf8_costs_the_replay_marks_not_the_report(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", 5)
    (run / "config.yaml").write_bytes(b"data:\n  mixture: mix\xff.yaml\n")
    assert main(["report", str(run)]) == 0
    assert (run / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "replayed sources not marked: the run's mixture is unreadable" in capsys.readouterr().out


def test_a_huge_bad_value_in_metrics_is_quoted_cut(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "run", 3)
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": "9" * 100_000, "loss": 1.0}) + "\n")
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ptk: error: {run / 'metrics.jsonl'}: line 4: step must be an integer, got '999")
    assert err.endswith("…(100002 chars)\n") and len(err) < 400
