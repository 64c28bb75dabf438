"""A Hugging Face sequence-classification model's score for each text: what `ptk score` and the
`classifier` filter step compute with a model folder (FineWeb-Edu's classifier is one: a BERT-style
encoder with one regression output).

    heads = hf_labels(Path("fineweb-edu-classifier"))          # [] for a regression head, else its labels
    model = HFClassifier.load(Path("fineweb-edu-classifier"), device="cpu")
    scores = model.scores(texts, label=None)                   # the regression output per text
    scores = model.scores(texts, label=1)                      # or the probability of label 1

A text is tokenized as transformers' own pipeline does (special tokens added), truncated at the
model's maximum length (the tokenizer's, no longer than the model's positions), and the texts are
run in batches of similar length (sorted by their tokens, padded to the longest of each batch, as
many as BATCH_SIZE texts of the maximum length hold): the padding a batch of mixed lengths would
cost is not computed, and a padded position changes no
output (the attention mask hides it), so each score is the one transformers gives the text alone,
within float error (1e-4; the tests compare them). transformers and torch are imported here only,
when a Hugging Face model is used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pretrainkit.errors import UserError

CONFIG_NAME = "config.json"
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
TORCH_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")  # pickles: read when the model loads
BATCH_SIZE = 32  # texts a forward pass reads at least (more where they are short: `_batches`)


def hf_labels(folder: Path) -> list[str]:
    """The labels of the model folder's classification head ([] for a regression head: one output),
    from its config.json alone (no transformers import); a folder without one is a UserError."""
    config = folder / CONFIG_NAME
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{folder}: not a Hugging Face model folder (no readable {CONFIG_NAME}: {e})") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise UserError(f"{config}: not a Hugging Face model config (no model_type)")
    id2label = data.get("id2label") or {"0": "LABEL_0", "1": "LABEL_1"}
    if data.get("problem_type") == "regression" or len(id2label) == 1 or data.get("num_labels") == 1:
        return []
    return [str(id2label[k]) for k in sorted(id2label, key=int)]


def check_hf_weights(folder: Path) -> None:
    """UserError (one line naming the file) unless the folder has weights a model loads from: each
    safetensors file's header is read and its data must cover the tensors it lists (a truncated or
    overwritten file is caught here, before any worker starts, not when each worker loads it)."""
    from safetensors import SafetensorError, safe_open

    if (folder / SAFETENSORS).is_file():
        files = [folder / SAFETENSORS]
    elif (folder / SAFETENSORS_INDEX).is_file():
        index = folder / SAFETENSORS_INDEX
        try:
            files = [
                folder / name
                for name in sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            ]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{index}: not a safetensors index ({type(e).__name__}: {e})") from None
    elif any((folder / name).is_file() for name in TORCH_WEIGHTS):
        return
    else:
        raise UserError(f"{folder}: no model weights ({SAFETENSORS}, {SAFETENSORS_INDEX} or {TORCH_WEIGHTS[0]})")
    for file in files:
        try:
            with safe_open(file, framework="numpy"):
                pass
        except (SafetensorError, OSError) as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"{file}: not a whole safetensors file ({reason})") from None


@dataclass
class HFClassifier:
    folder: Path
    tokenizer: Any
    model: Any
    device: str
    max_length: int

    @classmethod
    def load(cls, folder: Path, device: str = "cpu") -> HFClassifier:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        from transformers.utils import logging

        logging.set_verbosity_error()  # its warnings (unused weights of a checkpoint) are no errors of the run
        logging.disable_progress_bar()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UserError(f"--device {device}: no CUDA device is available here")
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            model = AutoModelForSequenceClassification.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError, KeyError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"{folder}: not a Hugging Face sequence-classification model ({first})") from None
        positions = getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length
        return cls(folder, tokenizer, model.to(device).eval(), device, int(min(tokenizer.model_max_length, positions)))

    def scores(self, texts: list[str], label: int | None) -> np.ndarray:
        """Each text's regression output (`label` None) or probability of `label`, in float64."""
        import torch

        if not texts:
            return np.zeros(0)
        ids = self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        out = np.empty(len(texts))
        with torch.inference_mode():
            for batch in _batches(order, [len(i) for i in ids], BATCH_SIZE * self.max_length):
                inputs = self.tokenizer.pad({"input_ids": [ids[i] for i in batch]}, return_tensors="pt")
                if bool(inputs["attention_mask"].all()):
                    # A mask that hides nothing changes no output but keeps torch's attention on its
                    # slower masked path (measured: 12-17% of the whole on bench.score's texts)
                    del inputs["attention_mask"]
                logits = self.model(**{k: v.to(self.device) for k, v in inputs.items()}).logits.float()
                found = logits[:, 0] if label is None else torch.softmax(logits, dim=-1)[:, label]
                out[batch] = found.cpu().numpy()
        return out


def _batches(order: list[int], lengths: list[int], most_tokens: int) -> list[list[int]]:
    """`order` (texts by increasing length) cut into batches of at least BATCH_SIZE texts, more while
    the batch, padded to its longest, holds at most `most_tokens` (BATCH_SIZE full-length texts'):
    short texts go many to a pass, which the processor runs faster than as many small ones."""
    batches, batch = [], []
    for i in order:
        if len(batch) >= BATCH_SIZE and (len(batch) + 1) * lengths[i] > most_tokens:
            batches.append(batch)
            batch = []
        batch.append(i)
    return [*batches, batch] if batch else batches
