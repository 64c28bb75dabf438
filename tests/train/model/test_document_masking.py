"""Document masking: a packed row of real documents (Reuters articles as bytes, EOS 256) scored
block-causally, positions restarting per document, gives each token the loss it has when its
document runs alone: through this project's model and through transformers on an imported Llama.
Also the masks themselves (documents, a sliding window) against attention written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from fixtures.corpora import DATA, need_data, reuters_documents
from pretrainkit.train.loop.documents import IGNORE_INDEX, document_ids, within_documents
from pretrainkit.train.model.attention_mask import attend, attention_mask, block_mask, document_starts
from pretrainkit.train.model.llama import ModelConfig, Transformer
from pretrainkit.train.model.materialize import load_hf_model

EOS = 256


def documents(lengths: list[int]) -> list[torch.Tensor]:
    """The first `lengths[i]` bytes of Reuters articles 0, 1, 2, ... as token tensors."""
    need_data(DATA / "reuters21578")
    texts = [text for _, text in reuters_documents(files=1)]
    return [
        torch.from_numpy(np.frombuffer(t.encode("utf-8")[:n], dtype=np.uint8).astype(np.int64))
        for t, n in zip(texts, lengths)
    ]


def packed(docs: list[torch.Tensor], next_token: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) [1, T] of one row `doc EOS doc EOS ... doc EOS next_token`, as the loader cuts it."""
    row = torch.cat([torch.cat([d, torch.tensor([EOS])]) for d in docs] + [torch.tensor([next_token])])
    return row[None, :-1], row[None, 1:]


def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none", ignore_index=IGNORE_INDEX)


def packed_losses(model, docs: list[torch.Tensor]) -> torch.Tensor:
    """Per-token losses of the packed row under document masking, the ignored targets left out."""
    inputs, targets = packed(docs, next_token=ord("T"))
    targets = within_documents(inputs, targets, EOS)
    with torch.no_grad():
        losses = token_losses(model(inputs, documents=document_ids(inputs, EOS)), targets)
    return losses[targets.flatten() != IGNORE_INDEX]


def alone_losses(forward, docs: list[torch.Tensor]) -> torch.Tensor:
    """Per-token losses of each document run alone (`doc EOS` as inputs: each token predicts the next,
    the last one the EOS), joined in order."""
    out = []
    for d in docs:
        inputs = torch.cat([d, torch.tensor([EOS])])[None]
        with torch.no_grad():
            logits = forward(inputs)
        out.append(token_losses(logits[:, :-1], inputs[:, 1:]))
    return torch.cat(out)


def test_packed_loss_equals_each_document_alone() -> None:
    # 534 tokens: three query tiles of the CPU path, documents crossing tile boundaries.
    docs = documents([150, 200, 181])
    cfg = ModelConfig(vocab_size=257, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=1024, init_std=0.1)
    model = Transformer(cfg, seed=1).eval()
    ours, alone = packed_losses(model, docs), alone_losses(model, docs)
    assert len(ours) == sum(len(d) for d in docs) == 531  # every token of every document, its EOS included
    torch.testing.assert_close(ours, alone, rtol=1e-5, atol=1e-5)
    # Without the mask the later documents see the earlier ones: their losses change.
    inputs, targets = packed(docs, next_token=ord("T"))
    targets = within_documents(inputs, targets, EOS)
    with torch.no_grad():
        unmasked = token_losses(model(inputs), targets)[targets.flatten() != IGNORE_INDEX]
    first = len(docs[0])
    torch.testing.assert_close(unmasked[:first], alone[:first], rtol=1e-5, atol=1e-5)
    assert (unmasked[first:] - alone[first:]).abs().max() > 1e-2


def test_packed_loss_equals_transformers_on_each_document(hf_model) -> None:
    directory, reference = hf_model("llama", num_attention_heads=4, num_key_value_heads=2)
    model, _ = load_hf_model(directory)
    docs = documents([70, 90, 80])  # the fixture's max_position_embeddings is 256
    ours, theirs = packed_losses(model.eval(), docs), alone_losses(lambda x: reference(x).logits, docs)
    assert theirs.std() > 0.5  # far from uniform: a leak across documents would show
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_eos_convention_and_restarted_positions() -> None:
    inputs = torch.tensor([[5, 6, EOS, 7, EOS, EOS, 8]])
    assert document_ids(inputs, EOS).tolist() == [[0, 0, 0, 1, 1, 2, 3]]
    targets = torch.tensor([[6, EOS, 7, EOS, EOS, 8, 9]])
    assert within_documents(inputs, targets, EOS).tolist() == [[6, EOS, -100, EOS, -100, -100, 9]]
    assert (torch.arange(7) - document_starts(document_ids(inputs, EOS))).tolist() == [[0, 1, 2, 0, 1, 0, 0]]


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # eager on purpose: no GPU here
def test_masks_match_attention_written_out(window: int | None) -> None:
    g = torch.Generator().manual_seed(0)
    b, h, kv, t, d = 2, 4, 2, 600, 8  # 600: query tiles of 256, 256 and 88
    q, k, v = (torch.randn(b, n, t, d, generator=g) for n in (h, kv, kv))
    docs = torch.randint(0, 40, (b, t), generator=g).sort(dim=1).values
    i = torch.arange(t)
    allowed = (i[None, :] <= i[:, None]) & (docs[:, :, None] == docs[:, None, :])
    if window is not None:
        allowed &= i[:, None] - i[None, :] < window
    scores = (q @ k.repeat_interleave(h // kv, dim=1).transpose(-1, -2)) / d**0.5
    expected = scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1) @ v.repeat_interleave(h // kv, dim=1)
    got = attend(q, k, v, attention_mask(t, q.device, docs, window), enable_gqa=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert attention_mask(t, q.device) is None  # plain causal: SDPA's is_causal kernel
    # The CUDA form's rule, run here by FlexAttention's eager forward (CPU has no FlexAttention backward).
    flex = flex_attention(q, k, v, block_mask=block_mask(t, q.device, docs, window), enable_gqa=True)
    torch.testing.assert_close(flex, expected, rtol=1e-5, atol=1e-5)


WINDOWED = dict(sliding_window=48, layer_types=("sliding_attention", "full_attention"))


@pytest.mark.parametrize(
    "family",
    [
        dict(family="qwen3"),
        dict(family="olmo2"),
        # a window shorter than the documents, on one layer of two: the mask is both at once
        dict(family="gemma3", **WINDOWED),
        dict(family="gemma2", **WINDOWED, attn_softcap=50.0),
        # a mixture of experts routes each token on its own: packing changes nothing there either
        dict(family="mixtral", n_experts=4, experts_per_token=2, norm_topk_prob=True),
    ],
    ids=["qwen3", "olmo2", "gemma3", "gemma2", "mixtral"],
)
def test_every_family_scores_a_packed_document_as_alone(family: dict) -> None:
    docs = documents([150, 90, 120])
    cfg = ModelConfig(vocab_size=257, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, max_seq_len=512, **family)
    model = Transformer(cfg, seed=3).eval()
    torch.testing.assert_close(packed_losses(model, docs), alone_losses(model, docs), rtol=1e-5, atol=1e-5)
