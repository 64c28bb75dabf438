"""The one exception type that reaches users as a one-line message instead of a traceback.

    raise UserError(f"{path}: line 3: key 'weight' must be > 0")

`ptk` prints `ptk: error: <message>` and exits with status 2 (1 for `ptk shards verify`
failures, which report through their own exit code).
"""


class UserError(Exception):
    """Bad input, bad configuration or a failed check, explained in one line naming the file."""


def os_error(e: OSError, path: object = None) -> UserError:
    """`OSError` as one line naming the file: `runs/a/metrics.jsonl: no space left on device`."""
    reason = e.strerror or str(e) or type(e).__name__
    return UserError(f"{e.filename or path}: {reason[:1].lower()}{reason[1:]}")
