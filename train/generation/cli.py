"""`ptk generate`: continue a prompt with any model the toolkit loads (run dir, checkpoint, export, HF directory).

    ptk generate runs/base --prompt "To be, or not to be" --max-new-tokens 40
    ptk generate hf-model/ --prompt "Once upon a time" --temperature 0.8 --top-p 0.95 --seed 1

The prompt and continuation go to stdout as the tokens come; a summary line goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time

from pretrainkit.arguments import int_in, number_in
from pretrainkit.errors import UserError
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.train.rundir.run_files import run_files_read


def cmd_generate(args: argparse.Namespace) -> int:
    from pretrainkit.train.checkpoint.load_model import describe, load_model
    from pretrainkit.train.generation.generate import stream

    loaded = load_model(args.model, tokenizer=args.tokenizer, device=args.device)
    if loaded.tokenizer is None:
        raise UserError(
            f"{args.model}: its tokenizer is not known; name it with --tokenizer (a tokenizer.json or an HF directory)"
        )
    tok = loaded.tokenizer
    prompt = tok.tokenizer.encode(args.prompt).ids
    try:  # the prompt's length and the options, checked before anything is printed
        tokens = stream(loaded.model, prompt, args.max_new_tokens, args.temperature, args.top_p, args.seed, tok.eos_id)
    except ValueError as e:
        raise UserError(f"{args.model}: {e}") from None
    print(f"ptk generate: {describe(loaded)}; prompt {len(prompt)} tokens", file=sys.stderr)
    new: list[int] = []
    shown = ""
    start = time.perf_counter()
    sys.stdout.write(args.prompt)
    for token in tokens:
        new.append(token)
        text = tok.tokenizer.decode(new)
        if not text.endswith("\ufffd"):  # a multi-byte character not yet complete waits for its next token
            sys.stdout.write(text[len(shown) :])
            sys.stdout.flush()
            shown = text
    sys.stdout.write(tok.tokenizer.decode(new)[len(shown) :] + "\n")
    seconds = time.perf_counter() - start
    why = "end of text" if new and new[-1] == tok.eos_id else f"--max-new-tokens {args.max_new_tokens}"
    mode = (
        "greedy" if args.temperature == 0 else f"temperature {args.temperature}, top-p {args.top_p}, seed {args.seed}"
    )
    print(
        f"ptk generate: {len(new)} new tokens in {seconds:.2f}s "
        f"({len(new) / max(seconds, 1e-9):.1f} tokens/s, {mode}); "
        f"stopped at {why}",
        file=sys.stderr,
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate",
        help="continue a prompt with a trained, exported or Hugging Face model",
        description="Continue TEXT with MODEL (a run dir, a checkpoint dir, a ptk export or a Hugging "
        "Face directory), with a key/value cache; greedy unless --temperature > 0.",
    )
    p.add_argument("model", metavar="MODEL")
    p.add_argument("--prompt", required=True, metavar="TEXT")
    p.add_argument(
        "--max-new-tokens", type=int_in(1, 1 << 20), default=64, help="tokens to generate at most (default 64)"
    )
    # The sampling options, checked when parsed, before a model is loaded: inf would sample uniformly, nan fail in torch
    p.add_argument(
        "--temperature", type=number_in(0, 100), default=0.0, help="sampling temperature, 0: greedy (default 0)"
    )
    p.add_argument(
        "--top-p",
        type=number_in(0, 1, lo_open=True),
        default=1.0,
        help="nucleus sampling: keep the smallest set of tokens reaching this probability",
    )
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0, help="of the sampling (default 0)")
    p.add_argument("--tokenizer", help="the model's tokenizer.json or HF directory, when MODEL does not lead to it")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.set_defaults(
        func=cmd_generate, url_arguments=UrlArguments(selected=(("model", run_files_read),), files=("tokenizer",))
    )
