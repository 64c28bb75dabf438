"""The mixture template `ptk split` writes beside its buckets: one source per bucket, named after its
future shard folder, weighted by its share of the text bytes with the top buckets upsampled.

    text = mixture_yaml(stats["buckets"], MixtureTemplate(upsample_top=2, factor=2.0))

Once each bucket is tokenized into `SHARDS_DIR/bucket-KK` beside the YAML file (`ptk tokenize
OUT/bucket-03 -o OUT/tokens/bucket-03 --tokenizer TOK`), the file is a mixture `ptk mix inspect` and
`ptk train` read (the schema: `pretrainkit.mixtures.config`; dataprep does not import mixtures, so the
YAML is written here as text). A bucket's weight is its share of the bytes times its factor: with no
upsampling every bucket is drawn in proportion to its size, one pass each; a bucket upsampled 2x is
drawn twice as often per byte, as Nemotron-CC weights its high-quality buckets. `max_epochs` on every
source stops a run that would repeat a bucket more than that (default 4: Muennighoff et al. 2023 found
up to ~4 epochs of repeated data cost little). A bucket without documents is left out, with a comment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pretrainkit.errors import UserError

SHARDS_DIR = "tokens"  # the bucket's shard folders, relative to the YAML file
DEFAULT_MAX_EPOCHS = 4.0


@dataclass(frozen=True)
class MixtureTemplate:
    upsample_top: int = 0  # how many of the highest buckets get `factor`
    factor: float = 1.0
    max_epochs: float = DEFAULT_MAX_EPOCHS

    def check(self, buckets: int) -> None:
        """A UserError for settings that make no mixture of `buckets` buckets."""
        if not 0 <= self.upsample_top <= buckets:
            raise UserError(f"--upsample-top names {self.upsample_top} top buckets of {buckets}")
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise UserError(f"--upsample-top's factor must be a positive number, got {self.factor}")
        if not (math.isfinite(self.max_epochs) and self.max_epochs > 0):
            raise UserError(f"--max-epochs must be a positive number, got {self.max_epochs}")

    def factor_of(self, index: int, buckets: int) -> float:
        return self.factor if index >= buckets - self.upsample_top else 1.0


def parse_upsample_top(given: str) -> tuple[int, float]:
    """`K:FACTOR` (`--upsample-top 2:3`) as (K, FACTOR)."""
    top, sep, factor = given.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(top), float(factor)
    except ValueError:
        raise UserError(
            f"--upsample-top takes K:FACTOR (e.g. 2:3, the top 2 buckets drawn 3x), got {given!r}"
        ) from None


def mixture_yaml(buckets: list[dict], template: MixtureTemplate) -> str:
    """The mixture of `buckets` (as buckets.json lists them) for `template`, as YAML text."""
    total = sum(b["text_bytes"] for b in buckets)
    upsampled = f"the top {template.upsample_top} drawn {template.factor:g}x" if template.upsample_top else "none"
    lines = [
        "# The quality buckets of `ptk split`, as a mixture (pretrainkit.mixtures.config).",
        f"# Tokenize each bucket into {SHARDS_DIR}/ beside this file first, e.g.",
        f"#   ptk tokenize bucket-00 -o {SHARDS_DIR}/bucket-00 --tokenizer TOKENIZER.json   (from this folder)",
        "# then check the passes over each bucket for a budget:  ptk mix inspect mixture.yaml --tokens 10B",
        f"# Weights: each bucket's share of the text bytes times its upsampling ({upsampled}).",
        "sources:",
    ]
    for index, b in enumerate(buckets):
        if b["docs"] == 0:
            lines.append(f"  # {b['name']}: no documents, left out")
            continue
        weight = b["text_bytes"] / max(1, total) * template.factor_of(index, len(buckets))
        lines += [
            f"  - name: {b['name']}",
            f"    shards: {SHARDS_DIR}/{b['name']}",
            f"    weight: {max(weight, 1e-9):.6g}",  # a bucket of empty texts still a training source
            f"    max_epochs: {template.max_epochs:g}",
        ]
    return "\n".join(lines) + "\n"
