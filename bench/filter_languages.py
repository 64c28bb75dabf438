"""Benchmark: how much of each translation the default filters keep, against the same pages in English.

    python -m bench.filter_languages [--handbook /usr/share/doc/debian-handbook/html] [--min-pages 10]

Corpus: the Debian Administrator's Handbook (Debian's `debian-handbook` package, GPL-2.0+ or
CC-BY-SA-3.0): the same HTML pages in 26 locales, each page's text by `ptk extract`'s `main_text`.
Run: `run_filter` with the default filters (language step included) on one worker. For each locale,
the pages the language step labelled with the locale's language (the others were left
untranslated, in English) and how many were kept, against how many of the same pages were kept in
English (`en-US`); locales with --min-pages such pages or more. Prints the table (docs/filter.md,
Per-language rules, holds it) and writes bench/results/filter_languages.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import write_result  # noqa: E402
from pretrainkit.dataprep.executors.local import LocalRunner  # noqa: E402
from pretrainkit.dataprep.extract.html import main_text  # noqa: E402
from pretrainkit.dataprep.filter.pipeline import FilterOptions, run_filter  # noqa: E402
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, read_filters  # noqa: E402

HANDBOOK = Path("/usr/share/doc/debian-handbook/html")
ENGLISH = "en-US"
LOCALE_LANGUAGES = {"nb-NO": "no"}  # lid.176 calls Norwegian Bokmål `no`; the others are their locale's language


def pages(root: Path) -> list[dict]:
    """A record per page of every locale: id `locale/page.html`, its main text."""
    records = []
    for locale in sorted(p.name for p in root.iterdir() if p.is_dir()):
        for page in sorted((root / locale).glob("*.html")):
            text = main_text(page.read_text(encoding="utf-8", errors="replace"))
            if text.strip():
                records.append({"id": f"{locale}/{page.name}", "text": text})
    return records


def kept_labels(out: Path) -> dict[str, str]:
    """The kept records' ids and their `lang`."""
    labels = {}
    for part in sorted(out.glob("part-*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes())
        labels.update((r["id"], r["lang"]) for r in map(json.loads, data.decode().splitlines()))
    return labels


def removed_labels(out: Path) -> dict[str, str | None]:
    return {r["id"]: r.get("lang") for r in map(json.loads, (out / "removed.jsonl").read_text().splitlines())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--handbook", type=Path, default=HANDBOOK, help="the handbook's html folder (one folder a locale)")
    ap.add_argument("--min-pages", type=int, default=10, help="compare a locale on this many translated pages or more")
    args = ap.parse_args()
    if not (args.handbook / ENGLISH).is_dir():
        sys.exit(f"{args.handbook}: no {ENGLISH} folder (apt-get install debian-handbook)")
    records = pages(args.handbook)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "pages.jsonl"
        corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        with LocalRunner(1) as runner:
            run_filter([str(corpus)], Path(tmp) / "out", FilterOptions(tuple(read_filters(DEFAULT_FILTERS))), runner)
        kept, removed = kept_labels(Path(tmp) / "out"), removed_labels(Path(tmp) / "out")
    labels = {**removed, **kept}
    english_kept = {r["id"].split("/", 1)[1] for r in records if r["id"] in kept and r["id"].startswith(ENGLISH)}
    rows = {}
    for locale in sorted({r["id"].split("/", 1)[0] for r in records} - {ENGLISH}):
        lang = LOCALE_LANGUAGES.get(locale, locale.split("-")[0])
        translated = [r["id"] for r in records if r["id"].startswith(f"{locale}/") and labels.get(r["id"]) == lang]
        if len(translated) < args.min_pages:
            continue
        n = len(translated)
        k = sum(i in kept for i in translated)
        e = sum(i.split("/", 1)[1] in english_kept for i in translated)
        rows[locale] = {"pages": n, "kept": round(k / n, 4), "english_kept": round(e / n, 4)}
    print("| locale | pages | kept | English, same pages | difference (points) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for locale, r in rows.items():
        points = 100 * (r["kept"] - r["english_kept"])
        print(f"| {locale} | {r['pages']} | {r['kept']:.1%} | {r['english_kept']:.1%} | {points:+.1f} |")
    worst = max(abs(r["kept"] - r["english_kept"]) for r in rows.values())
    print(f"largest difference: {100 * worst:.1f} points")
    write_result("filter_languages", {"pages": len(records), "locales": rows, "largest_difference": round(worst, 4)})


if __name__ == "__main__":
    main()
