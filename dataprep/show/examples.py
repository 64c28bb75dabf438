"""What `ptk show` reads of an output folder: per stage, its removed documents grouped by reason with
their counts and first examples, or its first kept records.

    shown = folder_examples(Path("out"), n=5)              # [StageExamples]: one, or a prepare's stages
    shown = folder_examples(Path("out"), n=5, kept=True)   # the first kept records of each stage
    shown[0].groups[0].reason, .count, .examples           # "gopher_quality.min_words", 432, [row, ...]

A stage's removed rows are its row file's (`ROW_FILES`: `removed.jsonl` of `ptk filter` and `ptk dedup
--paragraphs`, `duplicates.jsonl` of `ptk dedup`, `contaminated.jsonl` of `ptk decontaminate`), each
with the document's id, source, line, url (where it has one) and `text_head`. A row's reason is the
filter that removed it (`gopher_quality.min_words`, `paragraphs.min_length`), `dedup.exact` or
`dedup.near`, or `decontaminate.<the evaluation file>`. The examples are the first N rows of each
reason in the file's order (the input order), and the first N kept records in the parts' order: the
same folder always shows the same ones. Groups come by count, the largest first, then by name.
A `ptk prepare` output is shown stage by stage, in its pipeline's order.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from pretrainkit.dataprep.readers import Document, InputFile, ReadTask, described, read_task
from pretrainkit.errors import UserError
from pretrainkit.files import read_json_object
from pretrainkit.output_folders import DECONTAMINATE, DEDUP, FILTER, PARAGRAPHS, PREPARE, owner
from pretrainkit.stage_layout import KEPT_GLOB, REMOVED_NAME, STATS_NAME

KEPT = "kept"  # the one group of kept records


@dataclass(frozen=True)
class RowFile:
    """How a stage lists its removed documents: the file, and what in a row is its reason and its detail."""

    name: str
    reason: Callable[[dict], str]
    detail: Callable[[dict], str]  # the row's measure, for a person: "value 12, threshold 50"


def _filter_detail(row: dict) -> str:
    lang = f", lang {row['lang']} ({row['lang_score']})" if "lang" in row else ""
    return f"value {_json(row['value'])}, threshold {_json(row['threshold'])}{lang}"


def _json(value: object) -> str:
    """A value as its row writes it: `"{"` and `true` read as what they are."""
    return json.dumps(value, ensure_ascii=False)


ROW_FILES = {
    FILTER.name: RowFile(REMOVED_NAME, lambda r: r["filter"], _filter_detail),
    PARAGRAPHS.name: RowFile(REMOVED_NAME, lambda r: r["filter"], _filter_detail),
    DEDUP.name: RowFile(
        "duplicates.jsonl",
        lambda r: f"dedup.{r['kind']}",
        lambda r: (
            f"duplicate of {r['duplicate_of']} ({r['duplicate_of_source']}:{r['duplicate_of_line']}), "
            f"similarity {r['similarity']}"
        ),
    ),
    DECONTAMINATE.name: RowFile(
        "contaminated.jsonl",
        lambda r: f"decontaminate.{r['eval_file']}",
        lambda r: f"evaluation item {r['eval_id']}, shared n-gram {_json(r['ngram'])}",
    ),
}


@dataclass
class Group:
    reason: str
    count: int = 0
    examples: list[dict] = field(default_factory=list)  # the rows (kept: id, url, text_head), the first N


@dataclass(frozen=True)
class StageExamples:
    folder: Path
    command: str  # its owner: "ptk filter"
    rows: Path | None  # the row file the removed examples come from; None for kept records
    kept_docs: int
    removed_docs: int  # every reason's, whichever groups are shown
    groups: list[Group]
    report_only: bool = False  # `ptk decontaminate --report-only`: its rows list documents it kept

    def detail(self, row: dict) -> str:
        return ROW_FILES[self.command].detail(row) if self.rows else ""


def folder_examples(out: Path, n: int, kept: bool = False, reason: str | None = None) -> list[StageExamples]:
    """The examples of every stage `out` holds (see the module docstring); `reason`: that group only,
    a UserError naming those there are where no stage has it."""
    shown = [_stage_examples(folder, command, n, kept) for folder, command in _stage_folders(out)]
    if reason is None:
        return shown
    chosen = [replace(s, groups=[g for g in s.groups if g.reason == reason]) for s in shown]
    chosen = [s for s in chosen if s.groups]
    if not chosen:
        names = sorted({g.reason for s in shown for g in s.groups})
        there = f"the reasons there: {', '.join(names)}" if names else "it removed no documents"
        raise UserError(f"{out}: no document removed by '{reason}'; {there}")
    return chosen


def _stage_folders(out: Path) -> list[tuple[Path, str]]:
    """(folder, command) of each finished stage output `out` holds: itself, or a prepare's stages in order."""
    if not out.is_dir():
        raise UserError(f"{out}: no such folder" if not out.exists() else f"{out}: not a folder")
    command = owner(out)
    if command == PREPARE.name:
        stats = read_json_object(out / STATS_NAME, "a finished ptk prepare's stats") if _finished(out) else None
        if stats is None:
            raise UserError(f"{out}: an unfinished ptk prepare output (no {STATS_NAME}); finish it first")
        try:
            names = [next(iter(stage)) for stage in stats["pipeline"]]
            folders = [out / stats["stages"][name] for name in names]
        except (KeyError, TypeError, StopIteration):
            raise UserError(f"{out / STATS_NAME}: not a ptk prepare's stats (no 'pipeline' and 'stages')") from None
        stages = [(f, owner(f)) for f in folders]
        return [(f, c) for f, c in stages if c in ROW_FILES and _finished(f)]
    if command not in ROW_FILES:
        shown = ", ".join(ROW_FILES)
        what = f"a {command} output" if command else "no ptk output" if command == "" else "an empty folder"
        raise UserError(f"{out}: {what}; ptk show reads the outputs of {shown} and ptk prepare")
    if not _finished(out):
        raise UserError(f"{out}: an unfinished {command} output (no {STATS_NAME}); rerun that command to finish it")
    return [(out, command)]


def _finished(folder: Path) -> bool:
    return (folder / STATS_NAME).is_file()


def _stage_examples(folder: Path, command: str, n: int, kept: bool) -> StageExamples:
    stats = read_json_object(folder / STATS_NAME, f"a {command} output's stats")
    kept_docs = stats.get("kept_docs", 0)
    if kept:
        options = stats.get("options") or {}
        records = _kept_records(folder, options.get("text_field", "text"), options.get("id_field", "id"))
        group = Group(KEPT, kept_docs, [_kept_example(doc) for _, doc in zip(range(n), records)])
        return StageExamples(folder, command, None, kept_docs, 0, [group])
    rows = folder / ROW_FILES[command].name
    groups: dict[str, Group] = {}
    reason_of = ROW_FILES[command].reason
    for number, row in _rows(rows):
        try:
            reason = reason_of(row)
        except (KeyError, TypeError):
            raise UserError(f"{rows}: line {number}: not a {command} row (no reason in it)") from None
        group = groups.setdefault(reason, Group(reason))
        group.count += 1
        if len(group.examples) < n:
            group.examples.append(row)
    ordered = sorted(groups.values(), key=lambda g: (-g.count, g.reason))
    report_only = bool((stats.get("options") or {}).get("report_only"))
    return StageExamples(folder, command, rows, kept_docs, sum(g.count for g in ordered), ordered, report_only)


def _rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, row) of a row file, each line a JSON object, or a UserError naming the line."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None
    with f:
        for number, line in enumerate(f, 1):
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise UserError(f"{path}: line {number}: not a JSON row ({e})") from None
            if type(row) is not dict:
                raise UserError(f"{path}: line {number}: not a JSON object")
            yield number, row


def _kept_records(folder: Path, text_field: str, id_field: str) -> Iterator[Document]:
    for part in sorted(folder.glob(KEPT_GLOB)):
        for item in read_task(ReadTask(InputFile(str(part), part.name, part.stat().st_size)), text_field, id_field):
            if type(item) is not Document:
                raise UserError(f"{part}: line {item.line}: {item.reason}")
            yield item


def _kept_example(doc: Document) -> dict:
    return {"id": doc.id, "source": doc.source, "line": doc.line, **described(doc)}
