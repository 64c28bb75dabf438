"""Build the demo corpora from the Python standard library found on this machine (no download).

    python demo/stdlib_corpus.py OUT_DIR

Writes three JSONL corpora, one record per document ({"id", "text"}):
- `modules.jsonl`: the source of every standard-library module (tests excluded),
- `docstrings.jsonl`: the prose of every module, class and function docstring, one document per
  module (a second domain, for continued pretraining),
- `tests.jsonl`: the source of the standard library's test suite.
Files are visited in sorted order, so the corpora are the same on every run.
"""

from __future__ import annotations

import ast
import json
import sys
import sysconfig
import warnings
from pathlib import Path


def module_files(stdlib: Path) -> tuple[list[Path], list[Path]]:
    files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)
    tests = [p for p in files if {"test", "tests", "idle_test"} & set(p.relative_to(stdlib).parts)]
    test_set = set(tests)
    return [p for p in files if p not in test_set], tests


def docstrings(source: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return "\n\n".join(d for n in nodes if (d := ast.get_docstring(n)))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    modules, tests = module_files(stdlib)
    counts = {}
    for name, files in (("modules", modules), ("tests", tests)):
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for p in files:
                text = p.read_text(encoding="utf-8", errors="replace")
                f.write(json.dumps({"id": p.relative_to(stdlib).as_posix(), "text": text}) + "\n")
        counts[name] = len(files)
    with open(out / "docstrings.jsonl", "w", encoding="utf-8") as f:
        n = 0
        for p in modules:
            try:
                prose = docstrings(p.read_text(encoding="utf-8", errors="replace"))
            except SyntaxError:  # a few stdlib files are deliberately invalid (lib2to3 fixtures)
                continue
            if prose.strip():
                f.write(json.dumps({"id": p.relative_to(stdlib).as_posix(), "text": prose}) + "\n")
                n += 1
        counts["docstrings"] = n
    print(f"standard library at {stdlib}: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()) + f" -> {out}")


if __name__ == "__main__":
    main()
