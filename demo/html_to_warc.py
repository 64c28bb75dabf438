"""Write folders of HTML pages as one WARC.gz file, the way Common Crawl stores a crawl, to try
`ptk extract` and `ptk prepare` on pages already on this machine (no download).

    python demo/html_to_warc.py crawl.warc.gz ~/.rustup/toolchains/*/share/doc/rust/html/book ...

Every `*.html` file under each folder (sorted, so the file is the same on every run) becomes a
request record and a `200 OK` response record with a `text/html` HTTP header and the URL
`https://docs.example/<folder name>/<path>`, each record its own gzip member, after one warcinfo
record. Record ids and dates are derived from the URL and the page's bytes, not the clock.
"""

from __future__ import annotations

import gzip
import hashlib
import sys
import uuid
from pathlib import Path

DATE = "2026-01-01T00:00:00Z"  # fixed: the same pages give the same file


def record(kind: str, url: str, content_type: str, block: bytes) -> bytes:
    rid = uuid.UUID(bytes=hashlib.sha256(kind.encode() + url.encode() + block).digest()[:16])
    head = (
        f"WARC/1.0\r\nWARC-Type: {kind}\r\nWARC-Record-ID: <urn:uuid:{rid}>\r\nWARC-Date: {DATE}\r\n"
        + (f"WARC-Target-URI: {url}\r\n" if url else "")
        + f"Content-Type: {content_type}\r\nContent-Length: {len(block)}\r\n\r\n"
    )
    return gzip.compress(head.encode() + block + b"\r\n\r\n", mtime=0)


def main(out: str, folders: list[str]) -> int:
    pages = [(Path(d).name, p.relative_to(d).as_posix(), p) for d in folders for p in sorted(Path(d).rglob("*.html"))]
    if not pages:
        print(f"{', '.join(folders)}: no .html files", file=sys.stderr)
        return 2
    tmp = Path(out + ".tmp")
    with open(tmp, "wb") as f:
        f.write(record("warcinfo", "", "application/warc-fields", b"software: pretrainkit demo/html_to_warc.py\r\n"))
        for site, path, page in pages:
            url = f"https://docs.example/{site}/{path}"
            request = f"GET /{site}/{path} HTTP/1.1\r\nHost: docs.example\r\n\r\n".encode()
            f.write(record("request", url, "application/http; msgtype=request", request))
            html = page.read_bytes()
            http = f"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {len(html)}\r\n\r\n"
            f.write(record("response", url, "application/http; msgtype=response", http.encode() + html))
    tmp.replace(out)
    html_mb = sum(p.stat().st_size for _, _, p in pages) / 1e6
    print(f"wrote {len(pages)} pages ({html_mb:.1f} MB of HTML) to {out}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print("usage: python demo/html_to_warc.py OUT.warc.gz FOLDER...", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
