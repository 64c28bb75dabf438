"""The YAML files users write (mixtures, train configs), read strictly and their errors told in one line.

    doc = read_user_yaml(path, "mixture file")  # UserError in one line: missing, not UTF-8, bad YAML
    items = read_named_items(path, "filters file", "filters", "step", known=STEPS)  # [(name, settings, where)]
    doc = load_user_yaml(text)                  # SafeLoader types; `{weight: 1, weight: 5}` raises
    raise UserError(f"{path}: {yaml_error_line(e)}")   # "line 4: invalid YAML (duplicate key 'weight', ...)"

PyYAML keeps the last of a key given twice in one mapping without a word, so a mixture line edited
into `{weight: 1, weight: 5}` would silently train on weight 5. Keys brought in by a merge (`<<: *base`)
may still be set again: that is what merges are for.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from pretrainkit.errors import UserError, quoted

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


def read_named_items(path: Path, what: str, key: str, noun: str, known: Collection[str]) -> list[tuple[str, dict, str]]:
    """File `path` (a `what`) as a mapping of only `key` to a non-empty list of items, each a name of
    `known` or a mapping of one to its settings (`- dedup` or `- dedup: {threshold: 0.8}`), no name
    twice: (name, settings, where: "PATH: key[i]") per item, or a UserError in one line naming the
    file, the item and the problem."""
    doc = read_user_yaml(path, what)
    if not isinstance(doc, dict) or key not in doc:
        raise UserError(f"{path}: a {what} is a mapping with the key '{key}' (a list of {noun}s)")
    unknown = sorted(set(doc) - {key}, key=str)
    if unknown:
        raise UserError(f"{path}: unknown key {quoted(unknown[0])} (known: {key})")
    items = doc[key]
    if not isinstance(items, list) or not items:
        raise UserError(f"{path}: {key}: must be a non-empty list of {noun}s, got {quoted(items)}")
    out: list[tuple[str, dict, str]] = []
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        where = f"{path}: {key}[{i}]"
        if isinstance(item, str):
            name, given = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            ((name, given),) = item.items()
            given = {} if given is None else given
        else:
            raise UserError(
                f"{where}: a {noun} is its name, or a mapping of its name to its settings; got {quoted(item)}"
            )
        if name not in known:
            raise UserError(f"{where}: unknown {noun} {quoted(name)} (known: {', '.join(known)})")
        if not isinstance(given, dict):
            raise UserError(f"{where}.{name}: settings must be a mapping, got {quoted(given)}")
        if name in first:
            raise UserError(f"{where}: {noun} '{name}' given twice (also {key}[{first[name]}])")
        first[name] = i
        out.append((name, given, where))
    return out
