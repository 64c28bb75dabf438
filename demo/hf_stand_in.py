"""Write a small Hugging Face model with random weights and a given tokenizer, laid out as a Hub
checkpoint is (`config.json`, `model.safetensors`, `tokenizer.json`, `tokenizer_config.json`): a
stand-in for a downloaded model (Qwen/Qwen3-0.6B, google/gemma-3-1b-pt, allenai/OLMo-2-0425-1B)
on a machine that cannot download one, to try `init_from`, `ptk export` and `ptk generate` on.

    python demo/hf_stand_in.py qwen3 --tokenizer tok.json -o qwen3-base/

The first argument is a transformers `model_type` (qwen3, llama, mistral, qwen2, olmo2, gemma2,
gemma3_text, and the mixtures of experts qwen3_moe, olmoe, mixtral: 8 experts of 96, 2 per token);
the shape is small and fixed (4 layers, d_model 128, 4 heads and 2 KV heads of 32);
the vocabulary is the tokenizer's, rounded up to a multiple of 64 as published models pad it. The
weights are drawn from a fixed seed, so the same command writes the same model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
import transformers

# A mixture of experts' own settings, as each family's config names them: 8 small experts, 2 per token
# (their published defaults, 64 to 128 experts of 768 to 14,336, would make the stand-in the largest part).
MOE = {
    "qwen3_moe": {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 96, "norm_topk_prob": True},
    "olmoe": {"num_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 96},
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 96},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_type", help="a transformers model_type, e.g. qwen3")
    parser.add_argument("--tokenizer", required=True, type=Path, help="a tokenizer.json (ptk tokenizer train's)")
    parser.add_argument("-o", "--output", required=True, type=Path)
    args = parser.parse_args()
    tokenizer = json.loads(args.tokenizer.read_text(encoding="utf-8"))
    vocab = len(tokenizer["model"]["vocab"]) + len(
        [t for t in tokenizer["added_tokens"] if t["content"] not in tokenizer["model"]["vocab"]]
    )
    eos = next(t for t in tokenizer["added_tokens"] if t["content"] == "<|endoftext|>")
    try:
        shape = {
            "vocab_size": -(-vocab // 64) * 64,
            "hidden_size": 128,
            "intermediate_size": 384,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "max_position_embeddings": 1024,
            "tie_word_embeddings": False,
            "bos_token_id": None,
            "eos_token_id": eos["id"],
            "pad_token_id": None,
        }
        config = transformers.AutoConfig.for_model(args.model_type, **(shape | MOE.get(args.model_type, {})))
    except ValueError as e:
        print(f"hf_stand_in: {args.model_type}: {e}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(args.output)
    shutil.copy(args.tokenizer, args.output / "tokenizer.json")
    (args.output / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos["content"]}) + "\n"
    )
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {type(model).__name__} ({params / 1e6:.2f}M parameters, vocab {config.vocab_size}) to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
