"""Multiple-choice task files for the in-loop downstream evals (`eval.tasks`): read and validated.

    items = read_task_file("hellaswag.jsonl", where="run.yaml: eval.tasks[0].path")
    items[0].context, items[0].choices, items[0].label

One JSON object per line: `context` (a non-empty string: the prompt as lm-eval's `doc_to_text` renders
it), `choices` (at least two non-empty strings, each scored as the continuation `" " + choice`) and
`label` (the index of the right choice); other keys are ignored and blank lines skipped. A problem is
one line naming the config key, the file, the line and what is wrong, so a bad task file stops
`ptk train` before any process starts. No torch here: the config validates with this module alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.errors import UserError, quoted


@dataclass(frozen=True)
class Item:
    context: str
    choices: tuple[str, ...]
    label: int
    line: int  # in its file, for messages about the item


def read_task_file(path: str | Path, where: str) -> list[Item]:
    """The items of the task file `path`; UserError `WHERE: PATH: line N: problem` for a bad one."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{where}: {path}: no such task file") from None
    except OSError as e:
        raise UserError(f"{where}: {path}: cannot read: {e.strerror}") from None
    items = []
    for line_no, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            items.append(_item(line, line_no))
        except ValueError as e:
            raise UserError(f"{where}: {path}: line {line_no}: {e}") from None
    if not items:
        raise UserError(f"{where}: {path}: no items (expected JSON lines with context, choices and label)")
    return items


def _item(line: bytes, line_no: int) -> Item:
    """One line's item; ValueError saying what is wrong with it."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start + 1})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object with context, choices and label, got {quoted(record, 60)}")
    for key in ("context", "choices", "label"):
        if key not in record:
            raise ValueError(f"missing key {key!r} (an item has context, choices and label)")
    context, choices, label = record["context"], record["choices"], record["label"]
    if not isinstance(context, str) or not context:
        raise ValueError(f"context: must be a non-empty string, got {quoted(context, 60)}")
    if not isinstance(choices, list) or len(choices) < 2:
        raise ValueError(f"choices: must be a list of at least 2 strings, got {quoted(choices, 60)}")
    for i, choice in enumerate(choices):
        # acc_norm divides by the choice's length in characters: an empty choice has none.
        if not isinstance(choice, str) or not choice:
            raise ValueError(f"choices[{i}]: must be a non-empty string, got {quoted(choice, 60)}")
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
        raise ValueError(f"label: must be the index of the right choice (0 to {len(choices) - 1}), got {quoted(label)}")
    return Item(context, tuple(choices), label, line_no)
