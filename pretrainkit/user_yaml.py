"""The YAML files users write (mixtures, train configs), read strictly and their errors told in one line.

    doc = read_user_yaml(path, "mixture file")  # UserError in one line: missing, not UTF-8, bad YAML
    doc = load_user_yaml(text)                  # SafeLoader types; `{weight: 1, weight: 5}` raises
    raise UserError(f"{path}: {yaml_error_line(e)}")   # "line 4: invalid YAML (duplicate key 'weight', ...)"

PyYAML keeps the last of a key given twice in one mapping without a word, so a mixture line edited
into `{weight: 1, weight: 5}` would silently train on weight 5. Keys brought in by a merge (`<<: *base`)
may still be set again: that is what merges are for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from pretrainkit.errors import UserError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(ConstructorError):
    """A key given twice in one mapping."""


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            first_at: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = first_at.setdefault(key, key_node)
                except TypeError:  # an unhashable key: SafeLoader refuses it in its own words
                    continue
                if first is not key_node:
                    raise DuplicateKeyError(
                        None,
                        None,
                        f"duplicate key {key!r}, first given on line {first.start_mark.line + 1}",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep)


def load_user_yaml(text: str) -> Any:
    """The document in `text`, as `yaml.safe_load` reads it but refusing a key given twice in a mapping."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects


def yaml_error_line(e: yaml.YAMLError) -> str:
    """`line 4: invalid YAML (problem)`, or without the line where the error has no position."""
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}: " if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"{where}invalid YAML ({problem})"


def read_user_yaml(path: Path, what: str) -> Any:
    """The document in file `path` (a `what`: "config", "mixture file"), or a UserError in one line
    naming the file: missing, unreadable, not UTF-8 (the line and byte), or not valid YAML."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: {what} not found") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read {what}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x})") from None
    try:
        return load_user_yaml(text)
    except yaml.YAMLError as e:
        raise UserError(f"{path}: {yaml_error_line(e)}") from None
