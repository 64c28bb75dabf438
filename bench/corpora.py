"""Real corpora from `../shared/data/` as lists of documents, for tests and benchmarks.

    docs = reuters_documents()          # [(id, text)], bodies of the Reuters-21578 articles
    write_jsonl(docs, path)             # one {"id", "text"} record per line

Never copies the data into the repository; `shared_data_dir()` is None when the folder is absent.
Tests ask for a file or folder with `need_data(path)`: a missing one fails the test (never a
silent skip), unless PTK_ALLOW_MISSING_DATA=1 asks to skip such tests knowingly outside CI.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOW_MISSING_ENV = "PTK_ALLOW_MISSING_DATA"


def shared_data_dir() -> Path | None:
    d = ROOT.parent / "shared" / "data"
    return d if d.is_dir() else None


def need_data(path: Path) -> Path:
    """`path` (under ../shared/data) for a test. Missing, it fails the test saying what is needed; with
    PTK_ALLOW_MISSING_DATA=1 it skips it instead, except under CI (the `CI` variable set), where data
    that is not there means the suite did not test what it claims."""
    import pytest

    if path.exists():
        return path
    if os.environ.get(ALLOW_MISSING_ENV) == "1" and not os.environ.get("CI"):
        pytest.skip(f"{path} is absent ({ALLOW_MISSING_ENV}=1)")
    pytest.fail(f"{path} is absent: the tests read real corpora from ../shared/data beside the repository "
                f"(README: Tests); {ALLOW_MISSING_ENV}=1 skips these tests knowingly (not under CI)", pytrace=False)


def _data(name: str) -> Path:
    d = shared_data_dir()
    if d is None:
        raise FileNotFoundError("../shared/data is absent")
    return d / name


_REUTERS = re.compile(r'<REUTERS[^>]*NEWID="(\d+)"[^>]*>(.*?)</REUTERS>', re.S)
_BODY = re.compile(r"<BODY>(.*?)</BODY>", re.S)


def reuters_documents(files: int = 22) -> list[tuple[str, str]]:
    """Article bodies (SGML, latin-1), in file order; articles without a body are skipped."""
    docs = []
    for path in sorted(_data("reuters21578").glob("reut2-*.sgm"))[:files]:
        for new_id, article in _REUTERS.findall(path.read_text(encoding="latin-1")):
            body = _BODY.search(article)
            if body:
                text = html.unescape(body.group(1)).replace("\x03", "").strip()
                docs.append((f"reuters-{new_id}", text))
    return docs


def wikitext_documents(split: str = "valid") -> list[tuple[str, str]]:
    """Wikitext-2 articles (split at top-level ' = Title = ' headings)."""
    text = _data("wikitext2").joinpath(f"{split}.txt").read_text(encoding="utf-8")
    parts = re.split(r"\n(?= = [^=])", text)
    return [(f"wikitext-{split}-{i}", p.strip()) for i, p in enumerate(parts) if p.strip()]


def pep_documents() -> list[tuple[str, str]]:
    return [(p.stem, p.read_text(encoding="utf-8", errors="replace"))
            for p in sorted(_data("python_peps").joinpath("peps").iterdir()) if p.is_file()]


def license_documents() -> list[tuple[str, str]]:
    """Every fixture file and canonical license text of the licensee corpus."""
    root = _data("license_texts_licensee")
    files = sorted(p for p in (root / "fixtures").rglob("*") if p.is_file()) + sorted((root / "canonical").glob("*.txt"))
    return [(p.relative_to(root).as_posix(), p.read_text(encoding="utf-8", errors="replace")) for p in files]


def sentences() -> list[str]:
    """Sentences of four words or more from Reuters-21578, Wikitext-2 valid and the PEPs, in order."""
    text = " ".join(t for _, t in reuters_documents() + wikitext_documents() + pep_documents())
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text)) if len(s.split()) >= 4]


def write_jsonl(docs: list[tuple[str, str]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for doc_id, text in docs:
            f.write(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n")
    return path
