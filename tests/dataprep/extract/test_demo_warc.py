"""demo/html_to_warc.py: folders of HTML pages as a WARC.gz that `ptk extract` reads as a crawl."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fixtures.warc import rust_book_pages
from pretrainkit.cli import main

SCRIPT = Path(__file__).resolve().parents[3] / "demo" / "html_to_warc.py"


def test_html_folders_become_a_warc_that_extract_reads_page_by_page(tmp_path, capsys):
    site = tmp_path / "book"
    site.mkdir()
    for url, html in rust_book_pages(4):
        (site / url.rsplit("/", 1)[1]).write_bytes(html)
    (site / "nested").mkdir()
    shutil.copy(next(site.glob("*.html")), site / "nested" / "copy.html")
    for name in ("a.warc.gz", "b.warc.gz"):
        done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / name), str(site)], capture_output=True)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.warc.gz").read_bytes() == (tmp_path / "b.warc.gz").read_bytes()  # no clock in it
    assert main(["extract", str(tmp_path / "a.warc.gz"), "-o", str(tmp_path / "pages")]) == 0
    stats = json.loads((tmp_path / "pages" / "stats.json").read_text())
    assert stats["kept"] == 5 and stats["skipped"] == {"request record": 5, "warcinfo record": 1}
    assert "pages kept     5" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "c.warc.gz"), str(empty)], capture_output=True)
    assert done.returncode == 2 and b"no .html files" in done.stderr and not (tmp_path / "c.warc.gz").exists()
