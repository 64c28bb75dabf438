"""`make test-data` (fixtures/test_data.py) against a loopback HTTP server each test starts: fetching
into an empty cache, from a mirror or from the upstream URLs; a damaged or missing file on the mirror
(one line naming it and its expected sha256, exit status 1, nothing of it left in the cache); a second
run, which fetches nothing; a present ../shared/data, used in place. A small manifest of three files
stands in for fixtures/test_data.tsv, whose own listing is checked against the data folder last."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fixtures import test_data
from fixtures.corpora import DATA, need_data
from fixtures.test_data import MIRROR_ENV, DataFile, data_dir, get_test_data, read_manifest
from pretrainkit.files import sha256_file

ROOT = Path(__file__).resolve().parents[2]
FILES = {
    "corpus/a.txt": b"the first file\n",
    "corpus/sub/b.txt": b"the second file, a little longer\n" * 1000,
    "other/c.bin": bytes(range(256)) * 3,
}
PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")


@dataclass
class Server:
    url: str
    folder: Path  # what it serves: the mirror under mirror/, the upstream files under upstream/
    requested: list[str] = field(default_factory=list)


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[Server]:
    """An HTTP server on 127.0.0.1 (a free port) serving `folder` from a thread, recording each path asked."""
    server = Server("", folder)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(folder), **kwargs)

        def do_GET(self):
            server.requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):  # not on the test's stderr
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)  # its shutdown waits a poll
    thread.start()
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@pytest.fixture
def server(tmp_path, monkeypatch) -> Iterator[Server]:
    """The mirror (mirror/<path>) and the upstream (upstream/<path>) copies of FILES, on one loopback server."""
    for name in PROXY_VARIABLES:  # the loopback server is reached directly
        monkeypatch.delenv(name, raising=False)
    for name, data in FILES.items():
        for side in ("mirror", "upstream"):
            path = tmp_path / "web" / side / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    with serving(tmp_path / "web") as s:
        yield s


@pytest.fixture
def manifest(tmp_path, server) -> Path:
    lines = ["# path\tsize\tsha256\turl"]
    for name, data in FILES.items():
        lines.append(f"{name}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}\t{server.url}/upstream/{name}")
    path = tmp_path / "test_data.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def env_for(tmp_path: Path, server: Server | None = None) -> dict[str, str]:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache-home")}
    if server is not None:
        env[MIRROR_ENV] = f"{server.url}/mirror/"
    return env


def cache_of(tmp_path: Path) -> Path:
    return tmp_path / "cache-home" / "pretrainkit" / "test-data"


def cached_files(tmp_path: Path) -> dict[str, bytes]:
    """Every file in the cache but its lock and stamp: temporaries included."""
    cache = cache_of(tmp_path)
    found = {p.relative_to(cache).as_posix(): p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    return {name: data for name, data in found.items() if name not in (".lock", ".verified")}


def get(tmp_path: Path, manifest: Path, env: dict[str, str]) -> int:
    """A run of `make test-data` in-process, for a clone at tmp_path/repo (no ../shared/data beside it unless made)."""
    return get_test_data(read_manifest(manifest), root=tmp_path / "repo", env=env)


def test_an_empty_cache_is_filled_from_the_mirror(tmp_path, server, manifest, capsys):
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    assert cached_files(tmp_path) == FILES
    assert sorted(server.requested) == sorted(f"/mirror/{name}" for name in FILES)
    out = capsys.readouterr()
    assert f"{cache_of(tmp_path)}: 0 files present, 3 fetched (0.0 MB), 0 failed" in out.out and out.err == ""


def test_without_a_mirror_each_file_comes_from_its_upstream_url(tmp_path, server, manifest):
    assert get(tmp_path, manifest, env_for(tmp_path)) == 0
    assert cached_files(tmp_path) == FILES
    assert sorted(server.requested) == sorted(f"/upstream/{name}" for name in FILES)


def test_a_second_run_fetches_nothing_and_hashes_a_file_once(tmp_path, server, manifest, capsys, monkeypatch):
    hashed = []
    monkeypatch.setattr(test_data, "sha256_file", lambda path: hashed.append(path) or sha256_file(path))
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    asked = len(server.requested)
    capsys.readouterr()
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    assert len(server.requested) == asked and hashed == []  # a fetched file's stamp vouches for it
    assert "3 files present, 0 fetched" in capsys.readouterr().out
    assert cached_files(tmp_path) == FILES

    (cache_of(tmp_path) / ".verified").unlink()  # files put there by hand: hashed once, then trusted
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    assert len(hashed) == 3
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    assert len(hashed) == 3 and len(server.requested) == asked


@pytest.mark.parametrize("damage", ["other bytes", "cut short", "longer"])
def test_a_damaged_file_on_the_mirror_is_one_line_and_left_out_of_the_cache(tmp_path, server, manifest, damage):
    """Through the command line, for its exit status: a clone of fixtures/ with no ../shared beside it."""
    name = "corpus/sub/b.txt"
    data = FILES[name]
    damaged = {"other bytes": data.replace(b"second", b"SECOND", 1), "cut short": data[:-1], "longer": data + b"!"}
    (server.folder / "mirror" / name).write_bytes(damaged[damage])
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "fixtures", clone / "fixtures", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, **env_for(tmp_path, server), "PYTHONPATH": f"{clone}{os.pathsep}{ROOT}"}
    cmd = [sys.executable, "-m", "fixtures.test_data", "--manifest", str(manifest)]
    run = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)

    assert run.returncode == 1, run.stdout + run.stderr
    [line] = run.stderr.splitlines()
    assert line.startswith(f"test data: {cache_of(tmp_path) / name}: damaged download from {server.url}/mirror/{name}")
    assert line.endswith(f"(expected sha256 {hashlib.sha256(data).hexdigest()})")
    assert cached_files(tmp_path) == {n: d for n, d in FILES.items() if n != name}  # no temporary either
    assert "2 fetched (0.0 MB), 1 failed" in run.stdout


def test_a_file_missing_from_the_mirror_is_one_line_and_absent_from_the_cache(tmp_path, server, manifest, capsys):
    name = "corpus/a.txt"
    (server.folder / "mirror" / name).unlink()
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        f"test data: {cache_of(tmp_path) / name}: cannot fetch {server.url}/mirror/{name}: HTTP Error 404: "
        f"File not found (expected sha256 {hashlib.sha256(FILES[name]).hexdigest()})"
    )
    assert cached_files(tmp_path) == {n: d for n, d in FILES.items() if n != name}

    (server.folder / "mirror" / name).write_bytes(FILES[name])  # back on the mirror: only it is fetched
    asked = len(server.requested)
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    assert server.requested[asked:] == [f"/mirror/{name}"]
    assert cached_files(tmp_path) == FILES


def test_a_changed_file_in_the_cache_is_fetched_again_and_a_killed_runs_temporary_removed(
    tmp_path, server, manifest, capsys
):
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    cache = cache_of(tmp_path)
    changed = cache / "other" / "c.bin"
    changed.write_bytes(bytes(reversed(FILES["other/c.bin"])))  # the same size: its stamp no longer matches
    (cache / "corpus" / "a.txt.tmp-4711").write_bytes(b"the first")  # a download cut off by a kill
    asked = len(server.requested)

    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    assert server.requested[asked:] == ["/mirror/other/c.bin"]
    assert f"{changed}: not the file listed (768 bytes), fetching it again" in capsys.readouterr().out
    assert cached_files(tmp_path) == FILES


def test_a_present_shared_data_is_used_in_place(tmp_path, server, manifest, capsys):
    shared = tmp_path / "shared" / "data"
    for name, data in FILES.items():
        (shared / name).parent.mkdir(parents=True, exist_ok=True)
        (shared / name).write_bytes(data)
    assert data_dir(tmp_path / "repo", env_for(tmp_path)) == shared
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 0
    assert server.requested == [] and not (tmp_path / "cache-home").exists()
    assert f"test data: {shared} used in place: 3 of 3 files there with their sizes" in capsys.readouterr().out

    (shared / "corpus" / "a.txt").unlink()  # reported, not fetched: ../shared/data is its owner's
    assert get(tmp_path, manifest, env_for(tmp_path, server)) == 1
    expected = hashlib.sha256(FILES["corpus/a.txt"]).hexdigest()
    assert capsys.readouterr().err.splitlines() == [
        f"test data: {shared}/corpus/a.txt: absent (expected sha256 {expected})"
    ]
    assert server.requested == []


def test_a_mirror_that_is_no_url_and_a_bad_manifest_line_are_one_line_each(tmp_path, manifest, capsys):
    assert get(tmp_path, manifest, {**env_for(tmp_path), MIRROR_ENV: "datahost:8000"}) == 2
    assert (
        capsys.readouterr().err == f"test data: {MIRROR_ENV}=datahost:8000: not an http://, https:// or file:// URL\n"
    )
    bad = tmp_path / "bad.tsv"
    bad.write_text("# path\tsize\tsha256\turl\ncorpus/a.txt 15 95a2c91d3a8dea03 https://example.org/a.txt\n")
    assert test_data.main(["--manifest", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"test data: {bad}: line 2: expected path, size, sha256 and url separated by tabs\n"
    )


def test_without_shared_data_the_tests_read_the_user_cache(tmp_path):
    assert data_dir(tmp_path / "repo", env_for(tmp_path)) == cache_of(tmp_path)
    assert data_dir(tmp_path / "repo", {"XDG_CACHE_HOME": ""}) == Path.home() / ".cache" / "pretrainkit" / "test-data"


def test_the_manifest_lists_every_file_of_the_data_folder():
    listed = {f.path: f for f in read_manifest()}
    folder = need_data(DATA)
    found = {
        p.relative_to(folder).as_posix(): p.stat().st_size
        for p in folder.rglob("*")
        if p.is_file() and p.name != "SOURCE.md" and p.parent != folder  # the cache's lock and stamp: top level
    }
    assert found == {name: f.size for name, f in listed.items()}
    assert all(
        isinstance(f, DataFile) and f.url.startswith("https://raw.githubusercontent.com/") for f in listed.values()
    )
