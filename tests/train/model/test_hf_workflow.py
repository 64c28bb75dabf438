"""Continued pretraining of a Hugging Face model end to end: `init_from: HF_DIR` (the first loss is
transformers' loss on the same batch; 2-process FSDP equals 1 process), `ptk export --format hf` (loads
in AutoModelForCausalLM / AutoTokenizer with no missing or unexpected keys and the same logits), the
round trip through training, `ptk generate` (greedy equals transformers'), and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from fixtures.corpora import DATA, need_data
from pretrainkit.cli import main
from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.shards.tokenizer import load_tokenizer
from pretrainkit.stage_layout import LOCK_NAME, MARKER_NAME
from pretrainkit.train.checkpoint.load_model import load_model
from pretrainkit.train.generation.generate import generate
from pretrainkit.train.model.hf_adapter import MODEL_TYPES
from pretrainkit.train.model.llama import FAMILIES

SEQ, BATCH = 32, 8


def hf_config(kit, tmp: Path, directory: Path, mix: Path, **overrides) -> Path:
    """conftest's tiny run, initialized from `directory`, with no `model:` section (the shape comes from there)."""
    path = kit.config(
        tmp,
        data={"mixture": str(mix), "seq_len": SEQ},
        init_from=str(directory),
        max_steps=3,
        optim={"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 1},
        checkpoint={"every": 0, "keep": 1},
        eval={"every": 0},
        batch={"global_size": BATCH, "micro_size": 4},
    )
    cfg = yaml.safe_load(path.read_text())
    del cfg["model"]
    cfg.update(overrides)
    path.write_text(yaml.safe_dump(cfg))
    return path


def first_batch(mix: Path) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, _ = MixtureSampler(load_mixture(mix), seq_len=SEQ, global_batch_size=BATCH).batch(0)
    tokens = torch.from_numpy(tokens)
    return tokens[:, :-1], tokens[:, 1:]


def transformers_loss(reference, mix: Path) -> float:
    """transformers' loss on the run's first batch: what step 1 of a run initialized from it reports."""
    x, y = first_batch(mix)
    with torch.no_grad():
        return F.cross_entropy(reference(x).logits.flatten(0, 1), y.flatten()).item()


def transformers_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0
        )
    return out[0, len(prompt) :].tolist()


def assert_logits_close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item())


def load_in_transformers(directory: Path):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(directory, output_loading_info=True, dtype=torch.float32)
    assert not any(info.values()), info  # missing, unexpected, mismatched keys, errors
    return model.eval()


def test_round_trip_hf_train_export_hf(kit, hf_model_with_tokenizer, tmp_path: Path, capsys) -> None:
    from transformers import AutoTokenizer

    directory, reference, mix = hf_model_with_tokenizer("llama")
    config = hf_config(kit, tmp_path, directory, mix)
    assert main(["train", str(config)]) == 0
    assert f"initialized from {directory}" in capsys.readouterr().err

    # Step 1's loss is computed with the imported weights: transformers' loss on the same batch.
    assert kit.rows(tmp_path / "run")[0]["loss"] == pytest.approx(transformers_loss(reference, mix), rel=1e-4)
    x, _ = first_batch(mix)

    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "-o", str(out)]) == 0
    assert "Hugging Face llama" in capsys.readouterr().out
    exported = load_in_transformers(out)
    assert exported.config.model_type == "llama" and exported.config.rope_scaling["rope_type"] == "llama3"
    trained = load_model(tmp_path / "run")
    assert trained.tokenizer is not None and trained.step == 3  # found through init_from
    with torch.no_grad():
        ours, theirs = trained.model(x), exported(x).logits
        assert_logits_close(ours, theirs)
        assert not torch.allclose(theirs, reference(x).logits, atol=1e-3)  # training moved the weights

    prompt = trained.tokenizer.tokenizer.encode("MENENIUS:").ids
    # From the checkpoint, as `ptk generate RUN_DIR` does.
    assert generate(trained.model, prompt, 12) == transformers_greedy(exported, prompt, 12)

    tok = AutoTokenizer.from_pretrained(out)
    text = "ROMEO: But soft, what light through yonder window breaks?"
    assert tok(text).input_ids == trained.tokenizer.tokenizer.encode(text).ids
    assert tok.eos_token == "<|endoftext|>" and exported.generation_config.eos_token_id == trained.tokenizer.eos_id


@pytest.mark.parametrize("family", ["qwen3", "olmo2", "gemma2", "gemma3", "qwen3_moe", "olmoe", "mixtral"])
def test_continued_pretraining_of_each_family_exports_what_it_trained(
    kit, hf_model_with_tokenizer, family: str, tmp_path: Path
) -> None:
    """ptk train from the HF directory (step 1's loss is transformers'), then ptk export --format hf of
    the run: transformers loads it as the same model type, with the trained model's logits and greedy
    continuation (Gemma with a window of 8, shorter than the 32 training positions)."""
    gemma = family.startswith("gemma")
    directory, reference, mix = hf_model_with_tokenizer(family, **({"sliding_window": 8} if gemma else {}))
    assert main(["train", str(hf_config(kit, tmp_path, directory, mix))]) == 0
    assert kit.rows(tmp_path / "run")[0]["loss"] == pytest.approx(transformers_loss(reference, mix), rel=1e-4)
    x, _ = first_batch(mix)
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "-o", str(out)]) == 0
    exported = load_in_transformers(out)
    assert exported.config.model_type == reference.config.model_type and type(exported) is type(reference)
    trained = load_model(tmp_path / "run")
    prompt = trained.tokenizer.tokenizer.encode("MENENIUS:").ids
    with torch.no_grad():
        assert_logits_close(trained.model(x), exported(x).logits)
        assert not torch.allclose(exported(x).logits, reference(x).logits, atol=1e-3)  # training moved the weights
    assert generate(trained.model, prompt, 16) == transformers_greedy(exported, prompt, 16)


def test_a_gemma3_trained_from_scratch_exports_its_window(kit, hf_model_with_tokenizer, tmp_path: Path) -> None:
    """`model: {family: gemma3, sliding_window, layer_types, ...}` without init_from: transformers reads
    the export's window, RoPE bases, query scale and soft cap as the run's (logits on 32 positions, window 8)."""
    directory, _, mix = hf_model_with_tokenizer("qwen3")  # for its tokenizer and mixture only
    gemma = {
        "family": "gemma3",
        "head_dim": 16,
        "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_theta": 1e6,
        "rope_local_theta": 1e4,
        "query_scale": 24,
        "final_softcap": 30.0,
    }
    config = kit.config(
        tmp_path, data={"mixture": str(mix), "seq_len": SEQ}, model=gemma, max_steps=3, eval={"every": 0}
    )
    assert main(["train", str(config)]) == 0
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "-o", str(out), "--tokenizer", str(directory)]) == 0
    exported = load_in_transformers(out)
    assert type(exported).__name__ == "Gemma3ForCausalLM" and exported.config.sliding_window == 8
    assert exported.config.layer_types == gemma["layer_types"] and exported.config.query_pre_attn_scalar == 24
    x, _ = first_batch(mix)
    with torch.no_grad():
        assert_logits_close(load_model(tmp_path / "run").model(x), exported(x).logits)


def test_a_mixture_of_experts_trained_from_scratch_exports_its_experts(
    kit, hf_model_with_tokenizer, tmp_path: Path
) -> None:
    """`model: {family: qwen3_moe, n_experts, ...}` without init_from: transformers reads the export's
    experts, top-k, renormalization and dense layers as the run's (its logits on 32 positions)."""
    directory, _, mix = hf_model_with_tokenizer("qwen3")  # for its tokenizer and mixture only
    moe = {
        "family": "qwen3_moe",
        "n_experts": 4,
        "experts_per_token": 2,
        "moe_ffn_dim": 24,
        "norm_topk_prob": True,
        "mlp_only_layers": [1],
        "router_aux_loss_coef": 0.01,
    }
    config = kit.config(tmp_path, data={"mixture": str(mix), "seq_len": SEQ}, model=moe, max_steps=3, eval={"every": 0})
    assert main(["train", str(config)]) == 0
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), "--format", "hf", "-o", str(out), "--tokenizer", str(directory)]) == 0
    exported = load_in_transformers(out)
    assert type(exported).__name__ == "Qwen3MoeForCausalLM" and exported.config.mlp_only_layers == [1]
    assert (exported.config.num_experts, exported.config.num_experts_per_tok, exported.config.norm_topk_prob) == (
        4,
        2,
        True,
    )
    assert (exported.config.moe_intermediate_size, exported.config.router_aux_loss_coef) == (24, 0.01)
    x, _ = first_batch(mix)
    with torch.no_grad():
        assert_logits_close(load_model(tmp_path / "run").model(x), exported(x).logits)


@pytest.mark.parametrize(
    "family", ["mistral", "qwen2", "qwen3", "olmo2", "gemma2", "gemma3", "qwen3_moe", "olmoe", "mixtral"]
)
def test_hf_directory_exports_back_unchanged(hf_model_with_tokenizer, family: str, tmp_path: Path) -> None:
    """Imported from sharded safetensors, exported sharded: the same model_type, keys and logits (for
    Gemma 3 on 40 positions, past its window of 16)."""
    directory, reference, _ = hf_model_with_tokenizer(family, max_shard_size="40KB")
    assert len(list(directory.glob("model-*.safetensors"))) > 1
    out = tmp_path / "out"
    assert main(["export", str(directory), "--format", "hf", "-o", str(out), "--max-shard-size", "40K"]) == 0
    assert (out / "model.safetensors.index.json").is_file()
    exported = load_in_transformers(out)
    assert exported.config.model_type == MODEL_TYPES[family] == reference.config.model_type
    assert type(exported) is type(reference)
    assert exported.config.tie_word_embeddings == (family in ("qwen2", "gemma2", "gemma3"))
    x = torch.randint(0, 300, (2, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert_logits_close(exported(x).logits, reference(x).logits)


def test_export_writes_only_into_an_empty_folder_or_its_own_output(hf_model_with_tokenizer, tmp_path, capsys):
    directory, _, _ = hf_model_with_tokenizer("llama")
    capsys.readouterr()  # transformers' saving progress
    mine, shards, out = tmp_path / "mine", tmp_path / "shards", tmp_path / "out"
    for folder, name in ((mine, "notes.txt"), (shards, "manifest.json")):
        folder.mkdir()
        (folder / name).write_text("keep me")
    for folder, held in ((mine, "files of no ptk output (notes.txt)"), (shards, "a ptk tokenize output")):
        assert main(["export", str(directory), "--format", "hf", "-o", str(folder)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"ptk: error: -o {folder}: holds {held}; ptk export writes only into an empty folder or a ptk export output"
        ]
        assert [p.read_text() for p in folder.iterdir()] == ["keep me"]
    for _ in range(2):  # a rerun replaces its own output
        assert main(["export", str(directory), "--format", "hf", "-o", str(out)]) == 0
        assert {"config.json", "model.safetensors", MARKER_NAME} <= {p.name for p in out.iterdir()}
        assert not (out / LOCK_NAME).exists()
    load_in_transformers(out)


def test_native_export_config_is_not_an_hf_config(kit, tmp_path: Path) -> None:
    config = kit.config(tmp_path, max_steps=2, checkpoint={"every": 0, "keep": 1}, eval={"every": 0})
    assert main(["train", str(config)]) == 0
    assert main(["export", str(tmp_path / "run"), "-o", str(tmp_path / "native")]) == 0
    assert not (tmp_path / "native" / "config.json").exists()
    assert json.loads((tmp_path / "native" / "pretrainkit_model.json").read_text())["d_model"] == 32
    assert load_model(tmp_path / "native").kind == "native export"


@pytest.mark.parametrize(
    "family", ["llama", "qwen2", "qwen3", "olmo2", "gemma2", "gemma3", "qwen3_moe", "olmoe", "mixtral"]
)
def test_greedy_generation_equals_transformers(hf_model_with_tokenizer, family: str) -> None:
    directory, reference, _ = hf_model_with_tokenizer(family)
    loaded = load_model(directory)
    seen = set()
    for text in ("First Citizen:\nBefore we proceed", "KING HENRY:", "ROMEO: But soft, what light"):
        prompt = loaded.tokenizer.tokenizer.encode(text).ids
        ours = generate(loaded.model, prompt, max_new_tokens=24)  # Gemma 3: past its window of 16
        assert ours == transformers_greedy(reference, prompt, 24), text
        seen.update(ours)
    assert len(seen) > 3  # not one token repeated: a continuation that depends on the model


def test_ptk_generate_prints_the_continuation(hf_model_with_tokenizer, capsys) -> None:
    directory, _, _ = hf_model_with_tokenizer("llama")
    loaded = load_model(directory)
    prompt = "KING HENRY:"
    expected = loaded.tokenizer.tokenizer.decode(
        generate(loaded.model, loaded.tokenizer.tokenizer.encode(prompt).ids, 10)
    )
    assert main(["generate", str(directory), "--prompt", prompt, "--max-new-tokens", "10"]) == 0
    out, err = capsys.readouterr()
    assert out == prompt + expected + "\n"
    assert "10 new tokens" in err and "greedy" in err
    # Sampling is reproducible for a seed.
    runs = [
        main(["generate", str(directory), "--prompt", prompt, "--temperature", "1.0", "--top-p", "0.9", "--seed", "5"])
        or capsys.readouterr().out
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_ptk_generate_refuses_a_prompt_past_the_context_before_printing_anything(hf_model_with_tokenizer, capsys):
    directory, _, _ = hf_model_with_tokenizer("llama")
    context = load_model(directory).model.cfg.max_seq_len
    capsys.readouterr()
    assert main(["generate", str(directory), "--prompt", "KING HENRY: " * context, "--max-new-tokens", "10"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.strip().splitlines()
    assert (
        line.startswith(f"ptk: error: {directory}: prompt (") and f"the model's context of {context} positions" in line
    )


@pytest.mark.parametrize(
    "option, value, problem",
    [
        ("--max-new-tokens", "-1", "must be in [1, 1048576]"),
        ("--max-new-tokens", "0", "must be in [1, 1048576]"),
        ("--temperature", "nan", "must be in [0, 100]"),
        ("--temperature", "inf", "must be in [0, 100]"),
        ("--temperature", "-0.5", "must be in [0, 100]"),
        ("--top-p", "0", "must be in (0, 1]"),
        ("--top-p", "1.5", "must be in (0, 1]"),
        ("--top-p", "nan", "must be in (0, 1]"),
    ],
)
def test_ptk_generate_refuses_bad_sampling_options_in_one_line(tmp_path: Path, option, value, problem, capsys) -> None:
    """Refused when the command line is parsed: the model (here none) is never read."""
    sampling = [] if option == "--temperature" else ["--temperature", "1.0"]  # --top-p is read when sampling
    with pytest.raises(SystemExit) as e:
        main(["generate", str(tmp_path / "model"), "--prompt", "KING HENRY:", *sampling, option, value])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert err == f"ptk generate: error: argument {option}: {problem}, got '{value}' (see ptk generate --help)\n"
    assert out == ""


def test_mismatched_tokenizer_and_disagreeing_model_section_are_one_line(
    kit, hf_model_with_tokenizer, tmp_path: Path, capsys
) -> None:
    directory, _, mix = hf_model_with_tokenizer("qwen2")
    capsys.readouterr()
    wrong = hf_config(kit, tmp_path / "a", directory, kit.mixture)  # byte-level shards: another tokenizer
    assert main(["train", str(wrong)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ptk: error:") and "\n" not in err
    assert "tokenizer mismatch" in err and str(directory / "tokenizer.json") in err and "bbbbbbbbbbbb" in err
    clash = hf_config(kit, tmp_path / "b", directory, mix, model={"d_model": 48, "n_layers": 2})
    assert main(["train", str(clash)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ptk: error:") and "\n" not in err
    assert f"model.d_model: 48 disagrees with init_from {directory / 'config.json'} (64)" in err


def test_init_from_compares_vocabularies_not_file_bytes(
    kit, hf_model_with_tokenizer, tokenizer_variant, tmp_path: Path, capsys
) -> None:
    """The model's tokenizer.json written again in other bytes is the mixture's tokenizer; one with two
    token ids exchanged is refused in one line naming both tokenizers and what differs."""
    directory, _, mix = hf_model_with_tokenizer("llama")
    original = tmp_path / "original-tokenizer.json"
    original.write_bytes((directory / "tokenizer.json").read_bytes())
    tokenizer_variant(original, directory / "tokenizer.json", "reserialized")
    assert main(["train", str(hf_config(kit, tmp_path / "same", directory, mix))]) == 0
    assert f"initialized from {directory}" in capsys.readouterr().err
    tokenizer_variant(original, directory / "tokenizer.json", "swapped")
    assert main(["train", str(hf_config(kit, tmp_path / "other", directory, mix))]) == 2
    err = capsys.readouterr().err.strip()
    ours, theirs = load_mixture(mix).tokenizer, load_tokenizer(directory)
    assert err.startswith("ptk: error:") and "\n" not in err and "tokenizer mismatch" in err
    assert str(directory / "tokenizer.json") in err and theirs.sha256[:12] in err and ours.sha256[:12] in err
    assert (
        f"same vocab size {ours.vocab_size} but other tokens, merges or special tokens (vocabulary fingerprint "
        f"{theirs.vocab_fingerprint[:12]} vs {ours.vocab_fingerprint[:12]})"
    ) in err


@pytest.mark.distributed
def test_fsdp_and_tensor_parallel_imports_on_two_processes_equal_one(
    kit, hf_model_with_tokenizer, tmp_path: Path
) -> None:
    """Each process reads only its slices: FSDP row shards, and tensor-parallel column shards (wo, w2)
    and head groups of q/k/v, biases included (Qwen2). The downstream tasks of the last step (`eval.tasks`,
    7 items: shares of 4 and 3, so one FSDP rank pads its forwards) gather to one process's accuracies."""
    directory, _, mix = hf_model_with_tokenizer("qwen2")
    lines = [ln for ln in need_data(DATA / "tinyshakespeare" / "input.txt").read_text()[:6000].splitlines() if ln]
    items = [
        {"context": lines[i], "choices": [lines[i + 1][:20], lines[i + 7][:14], lines[i + 3][:9]], "label": i % 3}
        for i in range(0, 70, 10)
    ]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    tasks = {"tokenizer": str(directory), "tasks": [{"name": "lines", "path": str(tmp_path / "items.jsonl")}]}
    losses, accuracies = {}, {}
    for name, nproc, parallel in (("one", 1, "fsdp"), ("fsdp", 2, "fsdp"), ("tp", 2, {"data": "ddp", "tp": 2})):
        config = hf_config(kit, tmp_path / name, directory, mix, parallel=parallel, eval={"every": 3, **tasks})
        proc = kit.ptk(config, nproc=nproc)
        assert proc.returncode == 0, proc.stderr[-2000:]
        losses[name] = [r["loss"] for r in kit.rows(tmp_path / name / "run")]
        rows = [json.loads(line) for line in (tmp_path / name / "run" / "metrics.jsonl").read_text().splitlines()]
        accuracies[name] = [r["tasks"] for r in rows if "tasks" in r]
    assert losses["fsdp"] == pytest.approx(losses["one"], rel=1e-5)
    assert losses["tp"] == pytest.approx(losses["one"], rel=1e-5)
    assert accuracies["fsdp"] == accuracies["tp"] == accuracies["one"] and len(accuracies["one"]) == 1


def test_ptk_eval_scores_an_hf_directory_like_its_export(hf_model_with_tokenizer, tmp_path: Path, capsys) -> None:
    directory, _, mix = hf_model_with_tokenizer("mistral")
    assert main(["export", str(directory), "--format", "hf", "-o", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    reports = []
    for model in (directory, tmp_path / "out"):
        assert main(["eval", str(model), "--mixture", str(mix), "--seq-len", "64", "--json"]) == 0
        reports.append(json.loads(capsys.readouterr().out)["sources"])
    assert reports[0] == reports[1] and 2 < reports[0]["plays"]["loss"] < 20 and reports[0]["plays"]["bits_per_byte"]


@pytest.mark.parametrize("family", FAMILIES)
def test_autotokenizer_on_an_hf_export_gives_the_ids_training_gave(
    hf_model_with_tokenizer, family: str, tmp_path: Path
) -> None:
    """The conftest's BPE tokenizer (trained by `train_tokenizer`) exported with each family's config.json:
    AutoTokenizer must load `tokenizer.json` as it is (transformers 5 builds Qwen2's own tokenizer class
    for `qwen2`, another pre-tokenizer), and encode like `ptk tokenize`, special-token text included."""
    import textwrap

    from transformers import AutoTokenizer

    from pretrainkit.shards import ShardSet

    directory, _, _ = hf_model_with_tokenizer(family)
    out = tmp_path / "out"
    assert main(["export", str(directory), "--format", "hf", "-o", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == MODEL_TYPES[family]
    # Real text: Python's own documentation (docstrings of the standard library) and WikiText-2 with its
    # non-ASCII, plus a literal special token, which training encodes as plain text.
    wiki = need_data(DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8")[:20_000]
    texts = [m.__doc__ for m in (json, textwrap, pytest, Path) if m.__doc__] + [
        p for p in wiki.split("\n \n") if p.strip()
    ]
    texts.append("end of one story <|endoftext|> and, still inside the same document, the next")
    assert any(ord(c) > 127 for t in texts for c in t)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    assert (
        main(["tokenize", str(tmp_path / "docs.jsonl"), "--tokenizer", str(out), "-o", str(tmp_path / "shards")]) == 0
    )
    shards = ShardSet.open(tmp_path / "shards")
    assert shards.num_docs == len(texts)
    trained = [shards.document(i).tolist() for i in range(len(texts))]
    ours = load_tokenizer(out)
    assert ours.eos_id not in trained[-1]  # the literal `<|endoftext|>` became ordinary tokens
    for trust in (None, False, True):
        tok = AutoTokenizer.from_pretrained(out, **({} if trust is None else {"trust_remote_code": trust}))
        assert [tok(t).input_ids for t in texts] == trained, (family, trust, type(tok).__name__)
        assert (
            tok.eos_token == ours.eos_token == "<|endoftext|>"
            and tok.eos_token_id == ours.eos_id == shards.tokenizer.eos_id
        )
        assert tok.bos_token is None and ours.bos_token is None  # training adds no BOS; neither does transformers
        assert tok.decode(trained[0]) == texts[0]
