"""`ptk show OUT`: a stage's removed documents by reason, with counts and the first examples of each
(or its first kept records), from its output folder or from each stage of a `ptk prepare` output.

    ptk show out/filter                        # every reason: its count, its first 5 rows
    ptk show out --filter c4.lorem_ipsum --n 20
    ptk show out/dedup --kept --json           # the first kept records, as JSON
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pretrainkit.arguments import int_in
from pretrainkit.dataprep.show.examples import ROW_FILES, StageExamples, folder_examples
from pretrainkit.errors import UserError
from pretrainkit.remote.urls import is_url

EXAMPLES = int_in(0, 1_000_000)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "show",
        help="removed (or kept) examples of a dataprep output, by filter, to judge a rule",
        description="Print the documents a stage removed, grouped by reason (the filter, dedup.exact/near, "
        "decontaminate.<eval file>) with their counts, the largest first, and the first N of each in input "
        "order, each with its id, source and line, url and first 200 characters; or, with --kept, its first "
        f"kept records. OUT is the output folder of {', '.join(ROW_FILES)}, or of ptk prepare (each of its "
        "stages in turn).",
    )
    p.add_argument("output", metavar="OUT", help="output folder of a dataprep command or of ptk prepare, a local one")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--filter", metavar="NAME", help="only the documents this reason removed, e.g. c4.lorem_ipsum")
    which.add_argument("--kept", action="store_true", help="the first kept records instead of removed ones")
    p.add_argument("--n", type=EXAMPLES, default=5, help="examples per reason (default %(default)s; 0: counts only)")
    p.add_argument("--json", action="store_true", help="print one JSON object (the rows themselves) instead")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if is_url(args.output):  # a Path would make `s3://b/out` the missing folder `s3:/b/out`
        raise UserError(f"{args.output}: ptk show reads a local folder, not a URL; copy the output here first")
    shown = folder_examples(Path(args.output), args.n, kept=args.kept, reason=args.filter)
    if args.json:
        print(json.dumps({"output": str(args.output), "stages": [_as_json(s) for s in shown]}, ensure_ascii=False))
    else:
        print("\n\n".join(_as_text(s) for s in shown))
    return 0


def _as_json(stage: StageExamples) -> dict:
    return {
        "folder": str(stage.folder),
        "command": stage.command,
        "rows": None if stage.rows is None else str(stage.rows),
        "kept_docs": stage.kept_docs,
        "removed_docs": stage.removed_docs,
        "report_only": stage.report_only,
        "groups": [{"reason": g.reason, "count": g.count, "examples": g.examples} for g in stage.groups],
    }


def _as_text(stage: StageExamples) -> str:
    verb = " found" if stage.report_only else " removed" if stage.rows else ""
    how = "--report-only: not removed; " if stage.report_only else ""
    removed = f", {stage.removed_docs:,}{verb} ({how}each listed in {stage.rows})" if stage.rows else ""
    lines = [f"{stage.command} -> {stage.folder}: {stage.kept_docs:,} kept{removed}"]
    if stage.rows and not stage.groups:
        lines.append(f"  no document{verb}")
    for group in stage.groups:
        first = f", the first {len(group.examples)}" if group.examples else ""
        lines.append(f"  {group.reason}: {group.count:,}{verb}{first}")
        for i, row in enumerate(group.examples, 1):
            detail = stage.detail(row)
            lines.append(f"    {i}. {row['id']} ({row['source']}:{row['line']}){': ' + detail if detail else ''}")
            if "url" in row:
                lines.append(f"       {row['url']}")
            if "text_head" in row:  # the rows of an output written before rows had it have none
                lines.append(f"       {json.dumps(row['text_head'], ensure_ascii=False)}")
    return "\n".join(lines)
