"""`ptk trace`: the documents a training step's global batch was made of, from the data order alone.

    t = trace_step("runs/base", step=120, tokens=False)
    t["batch_sha256"]                      # equals metrics.jsonl's for step 120
    t["windows"][0]["segments"][0]         # {"source", "shard", "index", "id", "input", "line", "url"?, "start", "end"}
    print(format_trace(t))                 # a table per window

A step's global batch is a pure function of the mixture (its seed and replays), seq_len, the global batch
size and the batch index (`MixtureSampler`); the batch index is step - 1 unless a spike rollback skipped
batches, which `events.jsonl` lists (`batch_of_step`); a resume that changed the mixture started a new
order, which `mixture_changes.jsonl` lists (`sampler_of_step`). So any step of a finished or running run
is computed directly, reading its config and logs, the length columns of the record batches its windows
touch, and (for `batch_sha256` and `--tokens`) its rows' tokens: no replay of earlier steps.

Per window, its pieces of documents in order: the source, the shard file and the document's index in
the source's shard set (`ShardSet.document(index)`), its `id`, and `start`/`end`, offsets into the
document's tokens followed by its EOS. `input` and `line` are where the document was read: tokenize
names a record without an id `<input>:<line>` (`pretrainkit.dataprep.readers`), and keeps that id
through every stage; they are given where the id has that form and names one of the inputs the shard
manifest's provenance lists, and are null otherwise (a record that came with its own id). `url` is the
document's address where its record had one (`ptk extract`'s pages: the filter, dedup and decontaminate
stages keep their records' fields, and tokenize writes the urls in the shards, `ShardSet.document_url`);
a segment of a document without one has no `url` key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pretrainkit.errors import UserError
from pretrainkit.shards import ShardSet
from pretrainkit.train.rundir.names import CONFIG_FILE
from pretrainkit.train.rundir.run_dir import RunDir

if TYPE_CHECKING:  # the mixtures and the config load only when a trace is computed, not for `ptk --help`
    from pretrainkit.mixtures import MixtureSampler
    from pretrainkit.train.config import TrainConfig

_GENERATED_ID = re.compile(r"(.+):([1-9][0-9]*)")


def trace_step(run_dir: str, step: int, tokens: bool = False) -> dict:
    """The JSON form of step `step`'s global batch (see the module docstring); UserError for a folder that
    is not a run's or a step outside 1..max_steps."""
    # Imported here: the mixtures load only when a trace is computed, not for `ptk --help`.
    from pretrainkit.mixtures.sampler import rows_sha256
    from pretrainkit.train.config import load_config

    run = RunDir(run_dir)
    if not run.config_file.is_file():
        raise UserError(f"{run_dir}: no {CONFIG_FILE}: not a training run's folder (ptk train writes it at the start)")
    cfg = load_config(run.config_file, read_tasks=False)  # its data order only: no task file is read
    if not 1 <= step <= cfg.max_steps:
        raise UserError(f"--step {step}: {run_dir} trains steps 1 to {cfg.max_steps} (max_steps)")
    sampler = sampler_of_step(run, cfg, step)
    batch = batch_of_step(read_rollbacks(run.events), step)
    rows = sampler.batch(batch)[0]
    windows = [{"segments": segments} for segments in batch_segments(sampler, batch)]
    out = {"step": step, "batch": batch, "batch_sha256": rows_sha256(rows), "windows": windows}
    if tokens:
        out["tokens"] = rows.tolist()
    return out


def sampler_of_step(run: RunDir, cfg: TrainConfig, step: int) -> MixtureSampler:
    """The sampler whose order step `step` drew from: the config's; in a run resumed with a changed mixture
    (`mixture_changes.jsonl`), that of the stretch of steps holding the step: the config its last checkpoint
    recorded, from where the change before the stretch left the sources (as `TrainLoader.load_state_dict`
    rebased it). UserError when that stretch's mixture has changed since (its fingerprint differs)."""
    from pretrainkit.mixtures import MixtureSampler, load_mixture

    changes = read_mixture_changes(run.mixture_changes)
    stretch = sum(1 for c in changes if c["step"] < step)
    if stretch < len(changes):
        config = changes[stretch]["config"]
        mixture, seq_len, global_size = (
            config["data"]["mixture"],
            config["data"]["seq_len"],
            config["batch"]["global_size"],
        )
    else:
        mixture, seq_len, global_size = cfg.data.mixture, cfg.data.seq_len, cfg.batch.global_size
    mix = load_mixture(mixture, verify=False, shard_cache=cfg.data.cache.shard_cache()).with_replays(_loader_state_of)
    first = 0
    if stretch:
        start = changes[stretch - 1]["loader"]
        mix, first = mix.with_saved_starts(start, "next_token", require_all=False), start["batch"]
    sampler = MixtureSampler(mix, seq_len=seq_len, global_batch_size=global_size, first_batch=first)
    if stretch < len(changes) and sampler.fingerprint != changes[stretch]["loader"]["fingerprint"]:
        saved, last = changes[stretch]["loader"]["fingerprint"], changes[stretch]["step"]
        raise UserError(
            f"{run.mixture_changes}: the steps up to {last} trained on {mixture} with fingerprint {saved[:12]}; "
            f"it is {sampler.fingerprint[:12]} now (edited since?)"
        )
    return sampler


def _loader_state_of(path: Path) -> dict:
    """`loader_state_of`, imported (with torch: seconds) only for a mixture whose sources replay another run."""
    from pretrainkit.train.checkpoint.checkpoints import loader_state_of

    return loader_state_of(path)


def read_rollbacks(events: Path) -> list[dict]:
    """The rollback rows of a run's events.jsonl, in order (none without the file); UserError naming the file
    and line for a row that is not JSON or a rollback without its batches, but the last line of a running
    run, which may be half-written."""
    rows = []
    for number, row in _json_rows(events):
        if isinstance(row, dict) and row.get("action") == "rollback":
            t, skipped = row.get("rollback_to"), row.get("skipped_batches")
            if not (isinstance(t, int) and isinstance(skipped, list) and all(isinstance(b, int) for b in skipped)):
                raise UserError(f"{events}: line {number}: a rollback without rollback_to and skipped_batches")
            rows.append(row)
    return rows


def read_mixture_changes(path: Path) -> list[dict]:
    """The rows of a run's mixture_changes.jsonl, by step (none without the file): at each resume that changed
    the data order, `step` (the checkpoint's), `batch` (the new order's first), `config` (the checkpoint's, the
    steps before trained with) and `loader` (its loader state). UserError naming the file and line for a row
    without them."""
    rows = []
    for number, row in _json_rows(path):
        try:
            fields = (row["step"], row["batch"], row["loader"]["batch"], row["loader"]["fingerprint"])
            fields += (row["config"]["data"]["mixture"], row["config"]["data"]["seq_len"])
            fields += (row["config"]["batch"]["global_size"],)
        except (KeyError, TypeError):
            fields = ()
        if [type(f) for f in fields] != [int, int, int, str, str, int, int]:
            raise UserError(f"{path}: line {number}: a change without step, batch, config and loader state")
        rows.append(row)
    return sorted(rows, key=lambda r: r["step"])


def _json_rows(path: Path) -> Iterator[tuple[int, object]]:
    """(line number, row) of a JSONL log, nothing without the file; UserError naming the file and line for a
    row that is not JSON, but the last line of a running run, which may be half-written."""
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return
    for number, line in enumerate(lines, 1):
        try:
            yield number, json.loads(line)
        except ValueError:
            if number >= len(lines) - 1:  # the text after the last newline, or the last row being written
                continue
            raise UserError(f"{path}: line {number}: not a JSON row") from None


def batch_of_step(rollbacks: list[dict], step: int) -> int:
    """The global batch step `step` trained on. The loop draws batches in order and drops those in its skip
    set; a rollback to step t goes on from the batch after step t's, with its `skipped_batches` added to
    the skip set (`TrainingLoop`). So the run's history is a list of stretches (steps done at its start,
    first batch drawn, skip set), the steps after a rollback's t being the new stretch's."""
    stretches: list[tuple[int, int, frozenset[int]]] = [(0, 0, frozenset())]
    for row in rollbacks:
        t = row["rollback_to"]
        nxt = _batch_in(stretches, t) + 1 if t else 0
        skip = stretches[-1][2] | frozenset(row["skipped_batches"])
        stretches = [s for s in stretches if s[0] < t] + [(t, nxt, skip)]
    return _batch_in(stretches, step)


def _batch_in(stretches: list[tuple[int, int, frozenset[int]]], step: int) -> int:
    done, first, skip = next(s for s in reversed(stretches) if s[0] < step)
    batch = first + (step - done) - 1  # the (step - done)-th batch from `first` that is not skipped
    for skipped in sorted(skip):
        if first <= skipped <= batch:
            batch += 1
    return batch


def batch_segments(sampler: MixtureSampler, batch: int) -> list[list[dict]]:
    """Per window of global batch `batch`, in global order, its document segments as the JSON form has them
    (`source`, `shard`, `index`, `id`, `input`, `line`, `url` for a page, `start`, `end`); also what a spike's event in
    events.jsonl ranks by loss (`train/loop/spike_documents.py`)."""
    inputs = {s.name: provenance_inputs(s.shard_set) for s in sampler.sources}
    return [
        [_segment(source.name, source.shard_set, inputs[source.name], *piece) for piece in pieces]
        for source, pieces in sampler.segments(batch)
    ]


def provenance_inputs(shards: ShardSet) -> set[str]:
    """The input paths the shard set's manifest lists (relative to the input root tokenize was given)."""
    listed = shards.manifest.get("provenance", {}).get("inputs", [])
    return {entry["path"] for entry in listed if isinstance(entry, dict) and isinstance(entry.get("path"), str)}


def document_fields(shards: ShardSet, inputs: set[str], doc: int) -> dict:
    """Where document `doc` of a shard set is found: `shard`, `index`, `id`, `input`, `line` (the last two
    null unless the id names a line of one of `inputs`, `provenance_inputs`), and `url` for a page that
    has one (no key otherwise); also what `ptk eval --per-document` and a spike's event give a document."""
    shard, doc_id = shards.document_origin(doc)
    found = _GENERATED_ID.fullmatch(doc_id)
    read_from = found is not None and found[1] in inputs
    url = shards.document_url(doc)
    return {
        "shard": shard,
        "index": doc,
        "id": doc_id,
        "input": found[1] if read_from else None,
        "line": int(found[2]) if read_from else None,
        **({"url": url} if url is not None else {}),
    }


def _segment(source: str, shards: ShardSet, inputs: set[str], doc: int, start: int, end: int) -> dict:
    return {"source": source, **document_fields(shards, inputs, doc), "start": start, "end": end}


def format_trace(trace: dict) -> str:
    """The human-readable form: a header line, then a table per window of its document pieces."""
    windows = trace["windows"]
    lines = [
        f"step {trace['step']}: global batch {trace['batch']}, {len(windows)} windows, "
        f"batch_sha256 {trace['batch_sha256']}"
    ]
    header = ("source", "shard", "index", "id", "from", "tokens")  # from: input:line, else a page's url
    for w, window in enumerate(windows):
        table = [header] + [
            (
                s["source"],
                s["shard"],
                str(s["index"]),
                s["id"],
                f"{s['input']}:{s['line']}" if s["input"] is not None else s.get("url", "-"),
                f"{s['start']}-{s['end']}",
            )
            for s in window["segments"]
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines.append(f"window {w}")
        lines += ["  " + "  ".join(c.ljust(n) for c, n in zip(row, widths)).rstrip() for row in table]
        if "tokens" in trace:
            lines.append("  tokens: " + " ".join(map(str, trace["tokens"][w])))
    return "\n".join(lines)
