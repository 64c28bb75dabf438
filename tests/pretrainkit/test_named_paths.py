"""Every repository path a docstring, the README or a docs page names exists, and every package folder is
installed: a moved module leaves no stale pointer behind, and a new folder is not silently left out of
the wheel."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SOURCE_FOLDERS = ("pretrainkit", "dataprep", "shards", "mixtures", "train", "bench", "tests", "demo")
# A repository file named in prose: `train/loop/spikes.py`, `docs/dedup.md` (user paths in examples,
# such as `shards/web` or `runs/first/train.yaml`, are not .py files or docs pages).
# `$REPO/demo/x.py` names the checkout's file too.
FILE_NAME = re.compile(r"(?<![\w./-])(?:\$\{?\w+\}?/)?((?:[\w-]+/)+[\w-]+\.py|docs/[\w-]+\.md)\b")
# Where a named file can be: a path under another folder is a user's or a corpus's (`collections/__init__.py`,
# a document of the stdlib corpus, in an example's output).
REPOSITORY_FOLDERS = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
# A module named in prose, with or without its `pretrainkit.` prefix (`train.checkpoint.export.load_exported`).
MODULE_NAME = re.compile(r"(?<![\w./-])(pretrainkit(?:\.\w+)+|(?:dataprep|shards|mixtures|train)(?:\.[a-z_]+){2,})\b")
PACKAGE_DIR = {
    "pretrainkit.dataprep": "dataprep",
    "pretrainkit.shards": "shards",
    "pretrainkit.mixtures": "mixtures",
    "pretrainkit.train": "train",
}


def python_files() -> list[Path]:
    return sorted(p for folder in SOURCE_FOLDERS for p in (ROOT / folder).rglob("*.py"))


def docstrings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    return [doc for doc in (ast.get_docstring(n) for n in nodes) if doc]


def texts() -> list[tuple[str, str]]:
    found = [(str(p.relative_to(ROOT)), doc) for p in python_files() for doc in docstrings(p)]
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found.append((str(page.relative_to(ROOT)), page.read_text(encoding="utf-8")))
    return found


def module_exists(dotted: str) -> bool:
    """`pretrainkit.train.checkpoint.export.load_exported`: the longest importable prefix, the rest its attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attr in parts[end:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_named_file_exists():
    missing = sorted(
        {
            f"{where}: {name}"
            for where, text in texts()
            for name in FILE_NAME.findall(text)
            if name.split("/")[0] in REPOSITORY_FOLDERS and not (ROOT / name).exists()
        }
    )
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)


def test_every_named_module_exists():
    missing = sorted(
        {
            f"{where}: {name}"
            for where, text in texts()
            for name in MODULE_NAME.findall(text)
            if not module_exists(name if name.startswith("pretrainkit") else f"pretrainkit.{name}")
        }
    )
    assert not missing, "named but not importable:\n" + "\n".join(missing)


def test_pyproject_installs_every_package_folder():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert config["package-dir"] == PACKAGE_DIR
    listed = set(config["packages"])
    folders = set()
    for package, folder in {"pretrainkit": "pretrainkit", **PACKAGE_DIR}.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            folders.add(".".join([package, *relative.parts]))
    assert listed == folders
