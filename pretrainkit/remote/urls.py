"""Which paths are URLs, the fsspec filesystem that serves each, and storage errors as one line.

    if is_url(path):
        fs, key = filesystem(path)              # UserError naming the extra to install if the backend is missing
        with storage_errors(path, "read"):      # a missing key, denied access or dead endpoint -> one line
            data = fs.cat_file(key)

Backends are fsspec's maintained ones, installed as extras (`pip install 'pretrainkit[s3]'`); each
takes its credentials and endpoint from its own standard configuration (for S3 the AWS variables and
files, `AWS_ENDPOINT_URL` for MinIO and other compatible stores). The one setting added here is how
long a request waits and how often it is sent again (`remote.limits`: `PTK_STORAGE_TIMEOUT`,
`PTK_STORAGE_RETRIES`), so that an endpoint that never answers ends a command in one line.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import Iterator

from pretrainkit.errors import UserError
from pretrainkit.remote.limits import LIMITED, RequestLimits, is_timeout, one_retry_loop

# scheme -> (the fsspec backend package, the pretrainkit extra that installs it)
BACKENDS = {
    "s3": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "hf": ("huggingface_hub", "hf"),
}
READ_ONLY = {"hf"}  # Hugging Face Hub repositories are read here, never written
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def is_url(path: object) -> bool:
    """Whether `path` is a URL (`s3://bucket/key`), not a local path."""
    return isinstance(path, str) and _URL.match(path) is not None


def scheme(url: str) -> str:
    return _URL.match(url).group(1).lower()


def filesystem(url: str, writing: bool = False):
    """(fsspec filesystem, path within it) for `url`, its requests limited (`remote.limits`); a UserError
    for a scheme that is not supported, whose backend is not installed, or (`writing`) that is read-only."""
    name = scheme(url)
    if name not in BACKENDS:
        raise UserError(
            f"{url}: unsupported URL scheme {name}:// (supported: {', '.join(s + '://' for s in BACKENDS)})"
        )
    if writing and name in READ_ONLY:
        raise UserError(f"{url}: {name}:// is read-only here; write to a local path or a bucket")
    import fsspec

    limits = RequestLimits.from_environment()
    try:
        fs, path = fsspec.core.url_to_fs(url, **limits.options(name))
    except ImportError:
        package, extra = BACKENDS[name]
        raise UserError(f"{url}: {name}:// needs {package}: pip install 'pretrainkit[{extra}]'") from None
    one_retry_loop(fs, name)
    return fs, path


def join(url: str, *names: str) -> str:
    """`url` with `names` appended as path segments (empty ones: none)."""
    return "/".join([url.rstrip("/"), *(name for name in names if name)])


def beside(folder: str, relative: str) -> str:
    """The URL of the relative path `relative` (`../tokens/web`) from the bucket folder `folder`, `..`
    resolved as on a filesystem; ValueError when it leads out of the bucket."""
    head = f"{scheme(folder)}://"
    bucket, _, prefix = folder[len(head) :].rstrip("/").partition("/")
    key = posixpath.normpath(posixpath.join(prefix, relative))
    if key == ".." or key.startswith("../"):
        raise ValueError(f"{relative} leads out of the bucket {head}{bucket}")
    return f"{head}{bucket}/{key}" if key != "." else f"{head}{bucket}"


@contextlib.contextmanager
def storage_errors(url: str, doing: str) -> Iterator[None]:
    """What a storage call raises, as one UserError naming `url`: a missing bucket or key, denied
    access (wrong credentials), an endpoint that does not answer or cannot be reached (after the retries)."""
    try:
        yield
    except UserError:
        raise
    except FileNotFoundError as e:
        raise UserError(f"{url}: cannot {doing}: no such bucket or key ({_reason(e)})") from None
    except PermissionError as e:
        raise UserError(
            f"{url}: cannot {doing}: access denied ({_reason(e)}); check the credentials the "
            f"{scheme(url)}:// backend is configured with"
        ) from None
    except Exception as e:  # botocore, aiohttp, google-auth, azure: each backend has its own types
        if is_timeout(e) and scheme(url) in LIMITED:
            limits = RequestLimits.from_environment()
            raise UserError(f"{url}: cannot {doing}: the endpoint did not answer in {limits.describe()}") from None
        raise UserError(f"{url}: cannot {doing}: {type(e).__name__}: {_reason(e)}") from None


def _reason(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__
