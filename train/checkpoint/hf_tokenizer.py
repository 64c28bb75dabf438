"""The tokenizer files of a Hugging Face export, written so that `AutoTokenizer.from_pretrained(DIR)` gives
the ids training gave, whatever the model family.

    write_hf_tokenizer(loaded.tokenizer, directory, max_seq_len=cfg.max_seq_len)

`tokenizer.json` is copied byte for byte. transformers (5.x) does not always use it as it is: for some
model types (`qwen2` among them) AutoTokenizer ignores `tokenizer_class` and builds that family's own
tokenizer class, which replaces the normalizer and pre-tokenizer with the family's, so a custom
tokenizer gives other ids. An `auto_map` naming LOADER_MODULE's class (a `PreTrainedTokenizerFast`
that loads `tokenizer.json` unchanged) takes AutoTokenizer off that path: without
`trust_remote_code` it falls back to the generic fast tokenizer of `tokenizer_class`, and with it it
loads the class from the module written beside the tokenizer; both load the file as it is.

`split_special_tokens` matches how training encoded documents: the text of a special token inside a
document (a literal `<|endoftext|>`) is ordinary text, and EOS comes only from the pipeline. A
`tokenizer.json` whose post-processor adds a BOS (Llama 3's) still adds it in transformers; training
never adds one.
"""

from __future__ import annotations

import json
from pathlib import Path

from pretrainkit.files import write_bytes_atomic, write_text_atomic
from pretrainkit.shards.tokenizer import TOKENIZER_FILE, LoadedTokenizer

CONFIG_FILE = "tokenizer_config.json"
LOADER_MODULE = "tokenization_pretrainkit"
LOADER_CLASS = "PretrainkitTokenizer"
LOADER_SOURCE = f'''"""Loads this directory's tokenizer.json as it is (written by pretrainkit's \
`ptk export --format hf`)."""

from transformers import PreTrainedTokenizerFast


class {LOADER_CLASS}(PreTrainedTokenizerFast):
    """No family-specific normalizer or pre-tokenizer: the ids are those of tokenizer.json."""
'''


def write_hf_tokenizer(tok: LoadedTokenizer, directory: Path, max_seq_len: int) -> None:
    write_bytes_atomic(directory / TOKENIZER_FILE, Path(tok.path).read_bytes())
    write_text_atomic(directory / f"{LOADER_MODULE}.py", LOADER_SOURCE)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "auto_map": {"AutoTokenizer": [None, f"{LOADER_MODULE}.{LOADER_CLASS}"]},
        "eos_token": tok.eos_token,
        "split_special_tokens": True,
        "model_max_length": max_seq_len,
        "clean_up_tokenization_spaces": False,
    }
    if tok.bos_token is not None and tok.tokenizer.token_to_id(tok.bos_token) is not None:
        config["bos_token"] = tok.bos_token
    write_text_atomic(directory / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True) + "\n")
