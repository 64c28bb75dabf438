"""How long a storage request waits for an answer and how often it is sent again, as each backend's options.

    limits = RequestLimits.from_environment()       # PTK_STORAGE_TIMEOUT, PTK_STORAGE_RETRIES; a bad one: UserError
    fs, key = fsspec.core.url_to_fs(url, **limits.options("s3"))
    one_retry_loop(fs, "s3")                         # no second retry loop around the client's
    limits.describe()                                # "30 s (a request is tried 4 times at most; PTK_STORAGE_...)"

Why: an endpoint that accepts connections and never answers (a stopped server, a hung proxy) was waited
on for 417 s with no word: s3fs's retry loop (5 tries) around botocore's (5 attempts), each waiting
15 s. Here every request waits `timeout` seconds at most (to connect, and between two reads of its
answer), is sent at most `retries` more times (botocore's standard mode: timeouts, dropped connections,
throttling and 5xx answers, exponential backoff with jitter: at most 1, 2, 4... s, 20 s at most), and
s3fs's own loop makes one pass, so a frozen endpoint is given up after (1 + retries) x timeout seconds and
the backoff: about 2 minutes by default. The price of one loop: an answer that breaks off once its body
is being read (a connection dropped mid-transfer) is not read again by s3fs; it is one line as well.

The variables are read here only, and handed to the backend as its options (for S3, botocore's
`Config`, which takes precedence over `AWS_MAX_ATTEMPTS` and `AWS_RETRY_MODE`). gs://, az:// and hf://
keep their backends' own timeouts and retries: there is no server of theirs here to test settings against.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from pretrainkit.errors import UserError, quoted

TIMEOUT_ENV, RETRIES_ENV = "PTK_STORAGE_TIMEOUT", "PTK_STORAGE_RETRIES"
DEFAULT_TIMEOUT, DEFAULT_RETRIES = 30.0, 3
LIMITED = {"s3"}  # the schemes whose backend gets these limits
# Requests of one filesystem in flight at once. A request waiting for a connection has no timeout, and the
# connections go to waiting requests first, then to retries: with botocore's 10, the 64 requests of a batch
# met a frozen endpoint in 7 waves of (1 + retries) x timeout. The toolkit's batches are 64 requests (a
# shuffle window's range reads, a batch of files), two at once where the loader prefetches a window.
CONNECTIONS = 128


@dataclass(frozen=True)
class RequestLimits:
    timeout: float  # seconds a request waits to connect, and between two reads of its answer
    retries: int  # times a request that failed for a passing reason is sent again

    @classmethod
    def from_environment(cls) -> RequestLimits:
        return cls(
            timeout=_number(TIMEOUT_ENV, DEFAULT_TIMEOUT, "a number of seconds > 0", lambda v: v > 0),
            retries=int(_number(RETRIES_ENV, DEFAULT_RETRIES, "a whole number >= 0", lambda v: v >= 0 and v == int(v))),
        )

    def options(self, scheme: str) -> dict:
        """The storage options that give the backend of `scheme` these limits ({} for the others)."""
        if scheme not in LIMITED:
            return {}
        return {
            "config_kwargs": {
                "connect_timeout": self.timeout,
                "read_timeout": self.timeout,
                "retries": {"total_max_attempts": 1 + self.retries, "mode": "standard"},
                "max_pool_connections": CONNECTIONS,
            }
        }

    def describe(self) -> str:
        """`30 s (a request is tried 4 times at most; ...)`: what a message about a request that got no
        answer says, and which variables change it."""
        tries = "once" if self.retries == 0 else f"{1 + self.retries} times at most"
        return f"{self.timeout:g} s (a request is tried {tries}; {TIMEOUT_ENV}, {RETRIES_ENV} set this)"


def one_retry_loop(fs: object, scheme: str) -> None:
    """s3fs sends a request again (5 tries) when botocore has given up on it, which multiplies the tries;
    one pass of its loop leaves botocore's retries the only ones."""
    if scheme == "s3":
        fs.retries = 1


def is_timeout(e: BaseException) -> bool:
    """Whether `e` says a request got no answer in time. Each backend has its own type for it (botocore's
    ReadTimeoutError and ConnectTimeoutError, aiohttp's ServerTimeoutError, asyncio's TimeoutError), and
    all of them have Timeout in their name."""
    return any("Timeout" in cls.__name__ for cls in type(e).__mro__)


def _number(name: str, default: float, what: str, valid: Callable[[float], bool]) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and valid(value)):
        raise UserError(f"{name}={quoted(text)}: must be {what} (default {default:g})")
    return value
