"""In-loop downstream evals (`eval.tasks`): multiple-choice accuracy with lm-eval's conventions.

    suite = TaskSuite.load(cfg, mixture_tokenizer)           # the tasks' items, tokenized once
    correct = suite.correct(forward, rank, world, token_budget)  # this rank's share: [acc, acc_norm] per task
    suite.metrics(summed)   # {"hellaswag/acc": 0.31, "hellaswag/acc_norm": 0.33, ...} from the counts of all ranks

The conventions are lm-evaluation-harness's for a Hugging Face causal model (`HFLM`, default
arguments), so the numbers equal what lm-eval reports for the exported model (`ptk export --format hf`):
- each choice is the continuation `" " + choice` of the context (lm-eval's `target_delimiter`);
- `_encode_pair`: trailing whitespace of the context moves to the start of the continuation; the
  context + continuation is encoded as a whole, the context alone, and the continuation's tokens are
  the whole encoding's after the context encoding's length. Encoding is the tokenizer's as the export
  loads it in transformers: special tokens added as its `tokenizer.json` post-processor says (none for
  a `ptk tokenizer train` tokenizer; Llama 3's BOS for Llama 3's), except for a text starting with the
  BOS token's text (the EOS token's when there is no BOS), which lm-eval encodes without them; the
  text of a special token inside a text is plain text (the export's `split_special_tokens`);
- a sequence longer than `seq_len + 1` tokens keeps its last `seq_len + 1` (left truncation, as
  lm-eval does at the model's max length); the input is the sequence without its last token;
- a choice's log-likelihood is the sum of its continuation tokens' log-probabilities (log-softmax in
  float32); `acc` takes the argmax of those sums, `acc_norm` of the sums divided by each choice's length
  in characters (without the delimiter), the first choice winning ties (numpy's argmax, as lm-eval).

Every (context, choice) sequence is one row of a padded batch: right-padded, causal attention only
(a task sequence is one document, so document masking would change nothing), rows sorted by length
and packed into forwards of at most `token_budget` positions. The items of all tasks form one list,
split into contiguous shares over the data-parallel ranks; every rank runs the same number of
forwards (FSDP gathers its parameters in each), padding with one-token forwards where its share
needs fewer. Counts summed over ranks give the accuracies (the trainer's all-reduce).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pretrainkit.errors import UserError
from pretrainkit.shards.manifest import TokenizerInfo, tokenizer_difference
from pretrainkit.shards.tokenizer import LoadedTokenizer, load_tokenizer
from pretrainkit.train.config import TrainConfig
from pretrainkit.train.task_files import Item, read_task_file

DELIMITER = " "  # lm-eval's default target_delimiter between context and choice
IGNORE_INDEX = -100

Forward = Callable[[torch.Tensor], torch.Tensor]  # inputs [b, t] -> logits [b, t, vocab]


@dataclass(frozen=True)
class Request:
    """One (context, choice) sequence as the model scores it."""

    tokens: np.ndarray  # context + continuation, left-truncated to seq_len + 1 tokens
    continuation: int  # how many of the last tokens are the continuation's (the scored targets)


def encode_pair(tok: LoadedTokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's `TemplateLM._encode_pair` for a causal model: (context ids, continuation ids)."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, own = _encode(tok, context + continuation), _encode(tok, context)
    return own, whole[len(own) :]


def _encode(tok: LoadedTokenizer, text: str) -> list[int]:
    """HFLM.tok_encode: the tokenizer's special tokens, unless the text starts with the prefix token's text."""
    prefix = tok.bos_token or tok.eos_token
    return tok.tokenizer.encode(text, add_special_tokens=not text.startswith(prefix)).ids


def request(tok: LoadedTokenizer, context: str, choice: str, seq_len: int, where: str) -> Request:
    ctx, cont = encode_pair(tok, context, DELIMITER + choice)
    if not cont:
        raise UserError(f"{where}: choice {choice!r} encodes to no token of its own after the context")
    if len(cont) > seq_len:  # lm-eval asserts the same: no context token would be left to condition on
        raise UserError(f"{where}: choice of {len(cont)} tokens, longer than data.seq_len {seq_len}")
    return Request(np.asarray((ctx + cont)[-(seq_len + 1) :], dtype=np.int64), len(cont))


@dataclass(frozen=True)
class Task:
    name: str
    path: str
    items: list[Item]


class TaskSuite:
    def __init__(self, tasks: list[Task], tok: LoadedTokenizer, seq_len: int) -> None:
        self.names = [t.name for t in tasks]
        self.items = [item for t in tasks for item in t.items]
        self.task_of = np.array([k for k, t in enumerate(tasks) for _ in t.items], dtype=np.int64)
        self.item_counts = {t.name: len(t.items) for t in tasks}
        # What guessing scores: each item's 1 / number of choices, averaged (the report's reference line).
        self.chance = {t.name: float(np.mean([1 / len(i.choices) for i in t.items])) for t in tasks}
        self.requests: list[Request] = []
        self.first = np.zeros(len(self.items) + 1, dtype=np.int64)  # item i's requests: first[i]:first[i + 1]
        for i, item in enumerate(self.items):
            where = f"{tasks[self.task_of[i]].path}: line {item.line}"
            self.requests += [request(tok, item.context, c, seq_len, where) for c in item.choices]
            self.first[i + 1] = len(self.requests)

    @classmethod
    def load(cls, cfg: TrainConfig, mixture_tokenizer: TokenizerInfo) -> TaskSuite | None:
        """The config's tasks, tokenized with `eval.tokenizer`, which must be the mixture's; None without tasks."""
        if not cfg.eval.tasks:
            return None
        tok = load_tokenizer(cfg.eval.tokenizer)
        diff = tokenizer_difference(tok.info, mixture_tokenizer)
        if diff:
            raise UserError(f"eval.tokenizer: {cfg.eval.tokenizer} is not the mixture's tokenizer: {diff}")
        tasks = [
            Task(t.name, t.path, read_task_file(t.path, f"eval.tasks[{i}].path")) for i, t in enumerate(cfg.eval.tasks)
        ]
        return cls(tasks, tok, cfg.data.seq_len)

    # -- a rank's share ------------------------------------------------------------------------------
    def share(self, rank: int, world: int) -> range:
        """The items rank `rank` of `world` scores: contiguous blocks, every item in exactly one."""
        per = -(-len(self.items) // world)
        return range(min(rank * per, len(self.items)), min((rank + 1) * per, len(self.items)))

    def plan(self, rank: int, world: int, token_budget: int) -> list[list[int]]:
        """The forwards of a rank's share: request indices, longest first, each forward's rows times its
        longest input at most `token_budget` positions (a longer single row goes alone)."""
        share = self.share(rank, world)
        indices = sorted(
            range(self.first[share.start], self.first[share.stop]),
            key=lambda r: (-len(self.requests[r].tokens), r),
        )
        batches: list[list[int]] = []
        for r in indices:  # a batch's first row is its longest
            if batches and (len(batches[-1]) + 1) * (len(self.requests[batches[-1][0]].tokens) - 1) <= token_budget:
                batches[-1].append(r)
            else:
                batches.append([r])
        return batches

    def loglikelihoods(self, forward: Forward, rank: int, world: int, token_budget: int) -> dict[int, float]:
        """Each request of this rank's share: its continuation's summed log-probability."""
        plans = [self.plan(r, world, token_budget) for r in range(world)]
        out: dict[int, float] = {}
        for batch in plans[rank]:
            out.update(zip(batch, self._score(forward, batch)))
        for _ in range(max(len(p) for p in plans) - len(plans[rank])):  # as many forwards as the busiest rank
            forward(torch.zeros((1, 1), dtype=torch.long))
        return out

    def _score(self, forward: Forward, batch: list[int]) -> list[float]:
        rows = [self.requests[r] for r in batch]
        t = max(len(r.tokens) for r in rows) - 1
        inputs = torch.zeros((len(rows), t), dtype=torch.long)
        targets = torch.full((len(rows), t), IGNORE_INDEX, dtype=torch.long)
        for k, r in enumerate(rows):
            n = len(r.tokens) - 1
            inputs[k, :n] = torch.from_numpy(r.tokens[:-1])
            targets[k, n - r.continuation : n] = torch.from_numpy(r.tokens[-r.continuation :])
        logits = forward(inputs)
        scored = (targets != IGNORE_INDEX).to(logits.device)
        which = targets.to(logits.device)[scored]
        # Only the continuation positions' log-softmax, in float32 as lm-eval's; summed per row in float64.
        logp = -F.cross_entropy(logits[scored].float(), which, reduction="none")
        row = torch.arange(len(rows), device=logits.device)[:, None].expand(-1, t)[scored]
        sums = torch.zeros(len(rows), dtype=torch.float64, device=logits.device).index_add_(0, row, logp.double())
        return sums.tolist()

    def correct(self, forward: Forward, rank: int, world: int, token_budget: int) -> list[float]:
        """This rank's correct answers, [acc, acc_norm] per task in order (0 for tasks not in its share)."""
        lls = self.loglikelihoods(forward, rank, world, token_budget)
        counts = np.zeros((len(self.names), 2))
        for i in self.share(rank, world):
            item = self.items[i]
            ll = np.array([lls[r] for r in range(self.first[i], self.first[i + 1])])
            chars = np.array([float(len(c)) for c in item.choices])
            counts[self.task_of[i]] += [np.argmax(ll) == item.label, np.argmax(ll / chars) == item.label]
        return counts.ravel().tolist()

    def metrics(self, correct: list[float]) -> dict[str, float]:
        """`NAME/acc` and `NAME/acc_norm` from the counts summed over every rank's share."""
        counts = np.asarray(correct).reshape(len(self.names), 2)
        out = {}
        for name, (acc, norm) in zip(self.names, counts):
            out[f"{name}/acc"] = float(acc) / self.item_counts[name]
            out[f"{name}/acc_norm"] = float(norm) / self.item_counts[name]
        return out
