"""In-loop downstream evals (`eval.tasks`): the accuracies a run logs equal a reference written to
lm-eval's conventions and computed with transformers on the run's `ptk export --format hf`; every
item is scored by exactly one rank and the ranks' counts add up to one process's; bad task files
are one line naming the key, the file, the line and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from matplotlib.image import imread
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fixtures.wandb_records import history_rows, wandb_records
from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.mixtures import load_mixture
from pretrainkit.shards.tokenizer import load_tokenizer
from pretrainkit.train.checkpoint.load_model import load_model
from pretrainkit.train.config import load_config
from pretrainkit.train.evaluation.tasks import Task, TaskSuite
from pretrainkit.train.task_files import read_task_file

SEQ = 32


def generated_items(speeches: list[str], n: int, seed: int) -> list[dict]:
    """Multiple-choice items from Shakespeare: a speech's opening lines, its next line among lines of other
    speeches, each choice cut to 6-24 characters (to fit SEQ tokens, and acc_norm picks otherwise than acc).
    Some contexts end in spaces (lm-eval moves them into the continuation), some run past SEQ tokens
    (left truncation)."""
    rng = np.random.default_rng(seed)
    lines = [[ln for ln in s.splitlines() if ln.strip()] for s in speeches]
    lines = [ls for ls in lines if len(ls) >= 3]
    items = []
    for k in range(n):
        speech = lines[rng.integers(len(lines))]
        cut = 1 + int(rng.integers(len(speech) - 1))
        context = "\n".join(speech[:cut])
        if k % 3 == 0:
            context += " " * (1 + k % 2)
        if k % 5 == 0:
            context = "\n".join(lines[rng.integers(len(lines))]) + "\n" + context  # long: truncated on the left
        others = [lines[rng.integers(len(lines))][0] for _ in range(2 + k % 3)]
        choices = [c.strip()[: int(rng.integers(6, 25))] for c in (speech[cut], *others)]
        order = rng.permutation(len(choices))
        items.append({"context": context, "choices": [choices[i] for i in order], "label": int(np.argmin(order))})
    return items


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def lm_eval_reference(hf_dir: Path, items: list[dict], max_length: int) -> tuple[list[list[float]], dict]:
    """What lm-eval's HFLM (default arguments) and multiple_choice `process_results` compute, with
    transformers on the exported model: one unpadded sequence per forward."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    prefix = tok.decode(tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id)

    def tok_encode(text: str) -> list[int]:  # HFLM.tok_encode
        return tok.encode(text, add_special_tokens=False) if text.startswith(prefix) else tok.encode(text)

    all_lls, acc, acc_norm = [], 0, 0
    for item in items:
        lls = []
        for choice in item["choices"]:
            context, continuation = item["context"], " " + choice
            spaces = len(context) - len(context.rstrip())  # TemplateLM._encode_pair
            if spaces:
                continuation, context = context[-spaces:] + continuation, context[:-spaces]
            whole, context_enc = tok_encode(context + continuation), tok_encode(context)
            continuation_enc = whole[len(context_enc) :]
            inp = (context_enc + continuation_enc)[-(max_length + 1) :][:-1]  # _loglikelihood_tokens
            with torch.no_grad():
                logp = F.log_softmax(model(torch.tensor([inp])).logits[0], dim=-1, dtype=torch.float32)
            picked = logp[len(inp) - len(continuation_enc) : len(inp)].gather(
                1, torch.tensor(continuation_enc)[:, None]
            )
            lls.append(float(picked.sum()))
        chars = np.array([float(len(c)) for c in item["choices"]])
        acc += int(np.argmax(lls) == item["label"])
        acc_norm += int(np.argmax(np.array(lls) / chars) == item["label"])
        all_lls.append(lls)
    return all_lls, {"acc": acc / len(items), "acc_norm": acc_norm / len(items)}


@pytest.fixture
def task_run(kit, hf_corpus, tmp_path: Path):
    """A mixture of Shakespeare tokenized with hf_corpus's tokenizer and two generated task files."""
    from pretrainkit.dataprep.tokenize.corpus import write_text_shards

    tok_dir, speeches = hf_corpus
    write_text_shards(speeches, tmp_path / "shards", tok_dir)
    mix = tmp_path / "mix.yaml"
    mix.write_text(
        "seed: 3\nholdout: {fraction: 0.02, min_tokens: 1024}\nsources:\n  - {name: plays, shards: shards, weight: 1}\n"
    )
    items = {"lines": generated_items(speeches, 23, seed=1), "short": generated_items(speeches[::-1], 9, seed=2)}
    for name, rows in items.items():
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
    return tok_dir, mix, items


def test_logged_accuracies_equal_lm_eval_conventions_on_the_hf_export(kit, task_run, tmp_path: Path, capsys) -> None:
    tok_dir, mix, items = task_run
    config = kit.config(
        tmp_path,
        data={"mixture": str(mix), "seq_len": SEQ},
        max_steps=4,
        eval={
            "every": 2,
            "batches": 1,
            "tokenizer": str(tok_dir),
            "tasks": [{"name": "lines", "path": "lines.jsonl"}, {"name": "short", "path": "short.jsonl"}],
        },
        batch={"global_size": 4, "micro_size": 2},
        checkpoint={"every": 0, "keep": 1},
        logging={"tensorboard": True, "wandb": {"project": "ptk-test", "mode": "offline"}},
    )
    assert main(["train", str(config)]) == 0
    run = tmp_path / "run"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "tasks" in r]
    assert [r["step"] for r in evals] == [2, 4]
    assert evals[-1]["task_items"] == {"lines": 23, "short": 9}
    # The same numbers in TensorBoard and W&B, keyed NAME/acc and NAME/acc_norm.
    tensorboard = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0})
    tensorboard.Reload()
    (offline,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    history = [h for h in history_rows(wandb_records(offline)) if "lines/acc" in h]
    for key in ("lines/acc", "lines/acc_norm", "short/acc", "short/acc_norm"):
        expected = [(r["step"], pytest.approx(r["tasks"][key], rel=1e-6)) for r in evals]
        assert [(e.step, e.value) for e in tensorboard.Scalars(key)] == expected
        assert [(h["step"], h[key]) for h in history] == expected

    last = evals[-1]["tasks"]
    assert f"downstream tasks (lm-eval conventions): lines acc {last['lines/acc']:.4f}" in capsys.readouterr().err
    # ptk report draws them in a third row, and its summary lists them.
    assert main(["report", str(run), "-o", str(tmp_path / "report.png")]) == 0
    summary = capsys.readouterr().out
    assert (
        "6 panels: training loss, validation loss, learning rate, gradient norm, tokens/s, downstream tasks" in summary
    )
    assert f"task lines    acc last {last['lines/acc']:.3f}" in summary and "23 items" in summary
    assert imread(tmp_path / "report.png").shape[:2] == (1250, 1500)

    out = tmp_path / "hf"
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "-o", str(out), "--tokenizer", str(tok_dir)]) == 0
    loaded = load_model(tmp_path / "run", tokenizer=tok_dir)
    tok = load_tokenizer(tok_dir)
    for name, task_items in items.items():
        reference_lls, reference = lm_eval_reference(out, task_items, SEQ)
        assert evals[-1]["tasks"][f"{name}/acc"] == reference["acc"]
        assert evals[-1]["tasks"][f"{name}/acc_norm"] == reference["acc_norm"]
        # The log-likelihoods themselves, scored in padded batches by the suite on the trained weights.
        suite = TaskSuite([Task(name, name, read_task_file(tmp_path / f"{name}.jsonl", name))], tok, SEQ)
        with torch.no_grad():
            lls = suite.loglikelihoods(loaded.model, 0, 1, token_budget=3 * SEQ)
        ours = [[lls[r] for r in range(suite.first[i], suite.first[i + 1])] for i in range(len(task_items))]
        np.testing.assert_allclose(np.concatenate(ours), np.concatenate(reference_lls), rtol=1e-4, atol=1e-4)
        # The cases that matter occurred: sequences cut to SEQ + 1 tokens, others scored whole.
        assert {len(r.tokens) == SEQ + 1 for r in suite.requests} == {True, False}


def test_every_item_in_one_share_and_the_shares_add_up_to_one_process(hf_corpus, tmp_path: Path, one_thread) -> None:
    """The gather, proved in-process: each rank of 2, 3 and 5 scores its share with the same model, and
    the counts summed over ranks (what the trainer's all-reduce does) equal one process's."""
    from pretrainkit.train.model.llama import ModelConfig, Transformer

    tok_dir, speeches = hf_corpus
    tok = load_tokenizer(tok_dir)
    tasks = [
        Task(name, name, read_task_file(write_jsonl(tmp_path / f"{name}.jsonl", generated_items(speeches, n, s)), name))
        for name, n, s in (("a", 13, 3), ("b", 6, 4))
    ]
    suite = TaskSuite(tasks, tok, SEQ)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tok.vocab_size, d_model=32, n_layers=2, n_heads=4, max_seq_len=SEQ))
    model.eval()
    forwards = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        forwards.append(x.shape)
        return model(x)

    with torch.no_grad():
        one = suite.correct(forward, 0, 1, token_budget=2 * SEQ)
        for world in (2, 3, 5):
            shares = [suite.share(r, world) for r in range(world)]
            assert sorted(i for s in shares for i in s) == list(range(19))
            counts = []
            for rank in range(world):
                forwards.clear()
                counts.append(suite.correct(forward, rank, world, token_budget=2 * SEQ))
                # Every rank runs as many forwards as the busiest (FSDP gathers parameters in each).
                assert len(forwards) == max(len(suite.plan(r, world, 2 * SEQ)) for r in range(world))
            assert np.sum(counts, axis=0).tolist() == one
    metrics = suite.metrics(one)
    assert set(metrics) == {"a/acc", "a/acc_norm", "b/acc", "b/acc_norm"}
    assert metrics["a/acc"] == one[0] / 13 and metrics["b/acc_norm"] == one[3] / 6
    # Each forward holds at most the budget's positions, unless one row alone is longer.
    plan = suite.plan(0, 1, 2 * SEQ)
    widths = [[len(suite.requests[r].tokens) - 1 for r in batch] for batch in plan]
    assert all(len(w) * max(w) <= 2 * SEQ or len(w) == 1 for w in widths)
    assert sorted(r for batch in plan for r in batch) == list(range(len(suite.requests)))


def test_lm_eval_pair_encoding_moves_trailing_spaces_and_splits_at_the_context_length(hf_corpus) -> None:
    from pretrainkit.train.evaluation.tasks import encode_pair

    tok = load_tokenizer(hf_corpus[0])
    ids = lambda text: tok.tokenizer.encode(text).ids  # noqa: E731
    context, cont = encode_pair(tok, "ROMEO: But soft  ", " what light")
    assert context == ids("ROMEO: But soft") and context + cont == ids("ROMEO: But soft   what light")
    whole = ids("First Citizen: Speak")
    context, cont = encode_pair(tok, "First Citizen:", " Speak")
    assert context == ids("First Citizen:") and cont == whole[len(context) :]


BAD = [
    ("missing", None, "no such task file"),
    ("not json", "{oops\n", "line 1: not valid JSON"),
    ("not utf-8", b'{"context": "\xff"}\n', "line 1: not UTF-8 text (byte 14)"),
    ("a list", "[1, 2]\n", "line 1: expected a JSON object"),
    ("no label", '{"context": "a", "choices": ["b", "c"]}\n', "line 1: missing key 'label'"),
    ("empty context", '{"context": "", "choices": ["b", "c"], "label": 0}\n', "line 1: context: must be"),
    ("one choice", '{"context": "a", "choices": ["b"], "label": 0}\n', "line 1: choices: must be a list of at least 2"),
    ("empty choice", '{"context": "a", "choices": ["b", ""], "label": 0}\n', "line 1: choices[1]: must be a non-empty"),
    ("label range", '\n{"context": "a", "choices": ["b", "c"], "label": 2}\n', "line 2: label: must be the index"),
    ("label text", '{"context": "a", "choices": ["b", "c"], "label": "1"}\n', "line 1: label: must be the index"),
    ("empty file", "\n", "no items"),
]


@pytest.mark.parametrize("case, text, problem", BAD, ids=[c[0] for c in BAD])
def test_a_bad_task_file_is_one_line_naming_key_file_line_and_problem(
    kit, hf_corpus, tmp_path: Path, case: str, text: str | bytes | None, problem: str
) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", [{"context": "a", "choices": ["b", "c"], "label": 1}])
    bad = tmp_path / "bad.jsonl"
    if text is not None:
        bad.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    tasks = [{"name": "good", "path": good.name}, {"name": "bad", "path": bad.name}]
    config = kit.config(tmp_path, eval={"every": 2, "tokenizer": str(hf_corpus[0]), "tasks": tasks})
    with pytest.raises(UserError) as e:
        load_config(config)
    message = str(e.value)
    assert message.startswith(f"{config}: eval.tasks[1].path: {bad}: ") and problem in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"tokenizer": None}, "eval.tokenizer: required with eval.tasks"),
        ({"every": 0}, "eval.tasks: are scored at each evaluation: set eval.every >= 1"),
        ({"tasks": [{"name": "a/b", "path": "t.jsonl"}]}, "eval.tasks[0].name: letters, digits"),
        ({"tasks": [{"name": "train", "path": "t.jsonl"}]}, "eval.tasks[0].name: 'train' is reserved"),
        ({"tasks": [{"name": "t", "path": "t.jsonl"}] * 2}, "eval.tasks[1].name: 't' is given twice"),
        ({"tasks": [{"name": "t"}]}, "eval.tasks[0].path: required key is missing"),
        ({"tokenizer": "nowhere.json"}, "eval.tokenizer: "),
    ],
)
def test_bad_task_settings_are_one_line(kit, hf_corpus, tmp_path: Path, change: dict, problem: str) -> None:
    write_jsonl(tmp_path / "t.jsonl", [{"context": "a", "choices": ["b", "c"], "label": 1}])
    section = {"every": 2, "tokenizer": str(hf_corpus[0]), "tasks": [{"name": "t", "path": "t.jsonl"}], **change}
    config = kit.config(tmp_path, eval=section)
    raw = yaml.safe_load(config.read_text())
    raw["eval"] = {k: v for k, v in section.items() if v is not None}
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(UserError, match=None) as e:
        load_config(config)
    assert f"{config}: {problem}" in str(e.value), str(e.value)


def test_pipeline_parallel_runs_are_refused_with_tasks(kit, hf_corpus, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "t.jsonl", [{"context": "a", "choices": ["b", "c"], "label": 1}])
    config = kit.config(
        tmp_path,
        eval={"every": 2, "tokenizer": str(hf_corpus[0]), "tasks": [{"name": "t", "path": "t.jsonl"}]},
        parallel={"data": "fsdp", "pp": 2},
    )
    with pytest.raises(UserError, match=r"eval.tasks: not supported under pipeline parallelism"):
        load_config(config)


def test_a_tokenizer_other_than_the_mixtures_is_refused(kit, task_run, tmp_path: Path, byte_mixture) -> None:
    tok_dir, _, _ = task_run
    config = kit.config(
        tmp_path,
        data={"mixture": str(byte_mixture), "seq_len": SEQ},
        eval={"every": 2, "tokenizer": str(tok_dir), "tasks": [{"name": "lines", "path": "lines.jsonl"}]},
    )
    with pytest.raises(UserError, match=r"eval.tokenizer: .* is not the mixture's tokenizer"):
        TaskSuite.load(load_config(config), load_mixture(byte_mixture, verify=False).tokenizer)


def test_task_paths_are_relative_to_the_config_and_to_the_current_directory_for_set(
    kit, hf_corpus, tmp_path: Path, monkeypatch
) -> None:
    item = [{"context": "a", "choices": ["b", "c"], "label": 1}]
    write_jsonl(tmp_path / "in-config.jsonl", item)
    (tmp_path / "cwd").mkdir()
    write_jsonl(tmp_path / "cwd" / "from-set.jsonl", item)
    config = kit.config(
        tmp_path / "conf",
        eval={"every": 2, "tokenizer": str(hf_corpus[0]), "tasks": [{"name": "t", "path": "../in-config.jsonl"}]},
    )
    assert load_config(config).eval.tasks[0].path == str(tmp_path / "in-config.jsonl")
    monkeypatch.chdir(tmp_path / "cwd")
    cfg = load_config(config, ["eval.tasks=[{name: s, path: from-set.jsonl}]"])
    assert [(t.name, t.path) for t in cfg.eval.tasks] == [("s", str(tmp_path / "cwd" / "from-set.jsonl"))]
