"""Copies to and from a real S3 server on the loopback, and its errors as one line: an endpoint that
never answers too, given up after the retries the variables set."""

from __future__ import annotations

import time

import pytest
import s3fs

from fixtures.s3_server import frozen_endpoint
from pretrainkit.errors import UserError
from pretrainkit.remote.limits import RETRIES_ENV, TIMEOUT_ENV, is_timeout
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


@pytest.mark.timeout(60)  # without limits, s3fs's 5 tries of botocore's 5 attempts of 15 s: 417 s
def test_an_endpoint_that_never_answers_is_given_up_after_the_retries_in_one_line(monkeypatch):
    """Each request waits PTK_STORAGE_TIMEOUT and is tried 1 + PTK_STORAGE_RETRIES times, once in all:
    s3fs's loop does not multiply botocore's, and the 64 requests of a batch do not queue for connections
    (with botocore's 10, they would be answered, or not, in 7 waves)."""
    with frozen_endpoint() as endpoint:
        for name, value in {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            TIMEOUT_ENV: "1",
            RETRIES_ENV: "1",
        }.items():
            monkeypatch.setenv(name, value)
        s3fs.S3FileSystem.clear_instance_cache()
        began = time.monotonic()
        with pytest.raises(UserError) as listing:
            list_tree("s3://frozen/corpus")
        took = time.monotonic() - began
        # two tries of 1 s, up to 1 s of backoff between them, the client's own start (seconds on a loaded
        # machine); s3fs's loop around botocore's took 14 s
        assert 2 <= took < 10, took
        fs, _ = filesystem("s3://frozen/corpus")  # a shuffle window's 64 range reads, each one's outcome awaited
        began = time.monotonic()
        results = fs.cat_ranges([f"frozen/corpus/{i}" for i in range(64)], [0] * 64, [8] * 64, on_error="return")
        took = time.monotonic() - began
        assert all(is_timeout(r) for r in results)
        assert took < 10, took  # one wave (fewer tries once botocore's retry quota is spent); 7 waves took 12.5 s
    assert str(listing.value) == (
        "s3://frozen/corpus: cannot list: the endpoint did not answer in 1 s (a request is tried 2 times "
        "at most; PTK_STORAGE_TIMEOUT, PTK_STORAGE_RETRIES set this)"
    )
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize(
    "name, value, expected",
    [
        (TIMEOUT_ENV, "soon", "a number of seconds > 0 (default 30)"),
        (TIMEOUT_ENV, "0", "a number of seconds > 0 (default 30)"),
        (TIMEOUT_ENV, "inf", "a number of seconds > 0 (default 30)"),
        (RETRIES_ENV, "-1", "a whole number >= 0 (default 3)"),
        (RETRIES_ENV, "1.5", "a whole number >= 0 (default 3)"),
    ],
)
def test_a_bad_limit_is_one_line_naming_the_variable(monkeypatch, name, value, expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(UserError) as caught:
        filesystem("s3://b/x")
    assert str(caught.value) == f"{name}='{value}': must be {expected}"
