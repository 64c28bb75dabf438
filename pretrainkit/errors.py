"""The one exception type that reaches users as a one-line message instead of a traceback.

    raise UserError(f"{path}: line 3: key 'weight' must be > 0")

`ptk` prints `ptk: error: <message>` and exits with status 2 (1 for `ptk shards verify`
failures, which report through their own exit code).
"""


class UserError(Exception):
    """Bad input, bad configuration or a failed check, explained in one line naming the file."""
