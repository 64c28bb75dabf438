"""The one exception type that reaches users as a one-line message instead of a traceback.

    raise UserError(f"{path}: line 3: key 'weight' must be > 0")

`ptk` prints `ptk: error: <message>` and exits with status 2 (1 for `ptk shards verify`
failures, which report through their own exit code). A value from the user's data that a message
quotes goes through `quoted` or `shortened`: a 2 MB id must not make a 2 MB line.
"""

QUOTE_LIMIT = 200  # characters of a quoted value shown; more is cut and its length said


class UserError(Exception):
    """Bad input, bad configuration or a failed check, explained in one line naming the file."""


def shortened(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text`, or its first `limit` characters and `…(N chars)`."""
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} chars)"


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`repr(value)`, shortened: a value from a file, as a message quotes it."""
    return shortened(repr(value), limit)


def os_error(e: OSError, path: object = None) -> UserError:
    """`OSError` as one line naming the file: `runs/a/metrics.jsonl: no space left on device`."""
    reason = e.strerror or str(e) or type(e).__name__
    return UserError(f"{e.filename or path}: {reason[:1].lower()}{reason[1:]}")
