"""Progress bars for every long-running command: tqdm on a terminal, a plain line every N seconds elsewhere.

    with progress_bar(total=len(jobs), desc="dedup", unit="doc") as bar:
        bar.update(1)
    for shard in progress_bar(shards, desc="verify", unit="shard"):
        ...
    progress_write("ptk train: spike at step 12")   # a message that never lands on a bar's line
    end_bars()                                       # before an error: every bar on screen ends its line

When stderr is not a terminal (a log file, CI, a pipe), a bar is a `LineProgress`: one complete line
at most every `PTK_PROGRESS_SECONDS` seconds (default 30) and its final state when it closes (if
it printed any), instead of hundreds of carriage-return redraws. On a terminal it is a plain tqdm bar on stderr.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

from tqdm import tqdm

INTERVAL_ENV = "PTK_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 30.0


def line_interval() -> float:
    """Seconds between two progress lines when stderr is not a terminal."""
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL)))
    except ValueError:
        return DEFAULT_INTERVAL


def on_terminal() -> bool:
    return sys.stderr.isatty()


class LineProgress:
    """The part of tqdm's interface the toolkit uses, printed as whole lines at a fixed interval."""

    def __init__(
        self,
        iterable: Iterable | None = None,
        total: float | None = None,
        desc: str | None = None,
        unit: str = "it",
        unit_scale: bool = False,
        initial: float = 0,
        disable: bool = False,
        interval: float | None = None,
    ) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.total, self.desc, self.unit, self.unit_scale = iterable, total, desc, unit, unit_scale
        self.n = initial
        self.disable = disable
        self.interval = line_interval() if interval is None else interval
        self.postfix = ""
        self._start = self._last = time.monotonic()
        self._start_n = initial
        self._closed = False
        self._emitted_n: float | None = None  # n at the last line printed

    def __iter__(self) -> Iterator:
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return int(self.total or 0)

    def format_line(self) -> str:
        elapsed = time.monotonic() - self._start
        rate = (self.n - self._start_n) / elapsed if elapsed > 0 else None
        if self.total:
            fmt = "{desc}{n_fmt}/{total_fmt} {unit} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
        else:
            fmt = "{desc}{n_fmt} {unit} [{elapsed}, {rate_fmt}{postfix}]"
        return tqdm.format_meter(
            self.n,
            self.total,
            elapsed,
            prefix=self.desc or "",
            unit=self.unit,
            unit_scale=self.unit_scale,
            rate=rate,
            postfix=self.postfix or None,
            bar_format=fmt,
        )

    def _emit(self) -> None:
        sys.stderr.write(self.format_line() + "\n")
        sys.stderr.flush()
        self._last = time.monotonic()
        self._emitted_n = self.n

    def update(self, n: float = 1) -> None:
        self.n += n
        if not self.disable and time.monotonic() - self._last >= self.interval:
            self._emit()

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def reset(self, total: float | None = None) -> None:
        self.n = self._start_n = 0
        self._start = time.monotonic()
        if total is not None:
            self.total = total

    def refresh(self) -> None:
        if not self.disable:
            self._emit()

    def close(self) -> None:
        # The last state, once a log shows a bar at all (a bar done within the interval prints nothing).
        shown = self._emitted_n is not None or time.monotonic() - self._last >= self.interval
        if not self._closed and not self.disable and shown and self._emitted_n != self.n:
            self._emit()
        self._closed = True


def progress_bar(
    iterable: Iterable | None = None,
    *,
    total: float | None = None,
    desc: str | None = None,
    unit: str = "it",
    unit_scale: bool = False,
    initial: float = 0,
    disable: bool = False,
    leave: bool = True,
) -> tqdm | LineProgress:
    """A progress bar on stderr: tqdm on a terminal, `LineProgress` otherwise."""
    if on_terminal():
        return tqdm(
            iterable,
            total=total,
            desc=desc,
            unit=unit,
            unit_scale=unit_scale,
            initial=initial,
            disable=disable,
            leave=leave,
            dynamic_ncols=True,
            file=sys.stderr,
        )
    desc = f"{desc}: " if desc else None
    return LineProgress(iterable, total, desc, unit, unit_scale, initial, disable)


def progress_write(message: str) -> None:
    """One line on stderr; on a terminal the bars are cleared first and redrawn below it."""
    if on_terminal():
        tqdm.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr, flush=True)


def end_bars() -> None:
    """Close every bar still drawn so that the next line (an error) starts on a line of its own."""
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()
    sys.stderr.flush()
