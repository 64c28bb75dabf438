"""Copies to and from a real S3 server on the loopback, and its errors as one line."""

from __future__ import annotations

import pytest
import s3fs

from pretrainkit.errors import UserError
from pretrainkit.remote.transfer import download, list_tree, read_bytes, upload
from pretrainkit.remote.urls import filesystem, is_url


def test_upload_list_download_round_trip(s3, tmp_path):
    src = tmp_path / "stats.json"
    src.write_bytes(b'{"kept": 3}\n' * 1000)
    upload(src, f"{s3.bucket}/out/stats.json")
    upload(src, f"{s3.bucket}/out/deep/er/copy.json")
    assert list_tree(f"{s3.bucket}/out") == {"deep/er/copy.json": 12000, "stats.json": 12000}
    assert list_tree(f"{s3.bucket}/out/stats.json") == {"": 12000}
    assert list_tree(f"{s3.bucket}/none") == {}
    back = download(f"{s3.bucket}/out/deep/er/copy.json", tmp_path / "back" / "copy.json")
    assert back.read_bytes() == src.read_bytes() == read_bytes(f"{s3.bucket}/out/stats.json")
    # the upload went through a temporary key that is gone: only the two objects exist
    assert sorted(s3.objects(s3.bucket.removeprefix("s3://"))) == ["out/deep/er/copy.json", "out/stats.json"]


def test_missing_key_and_missing_bucket_are_one_line(s3, tmp_path):
    with pytest.raises(UserError, match=r"s3://.*/nothing.json: cannot download: no such bucket or key"):
        download(f"{s3.bucket}/nothing.json", tmp_path / "x")
    with pytest.raises(UserError, match=r"s3://no-such-bucket/x: cannot list: no such bucket or key"):
        list_tree("s3://no-such-bucket/x")
    assert not (tmp_path / "x").exists()


def test_wrong_credentials_are_one_line_naming_the_url(s3, monkeypatch):
    for name, value in s3.environment("AKIAWRONGKEY", "wrong-secret").items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.raises(UserError, match=r"^s3://.*: cannot list: access denied \(.*\); check the credentials"):
        list_tree(s3.bucket)


def test_schemes():
    assert is_url("s3://b/k") and is_url("gs://b") and not is_url("/data/s3:/x") and not is_url("corpus/")
    with pytest.raises(UserError, match=r"^ftp://h/x: unsupported URL scheme ftp://"):
        filesystem("ftp://h/x")
    with pytest.raises(UserError, match=r"^hf://datasets/x/y: hf:// is read-only here"):
        filesystem("hf://datasets/x/y", writing=True)
