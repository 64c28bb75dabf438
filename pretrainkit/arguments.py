"""The argument parser of every `ptk` command: a bad argument is one line, like every other error;
and the numbers an option or a file's setting may take, said once for both.

    parser = CommandParser(prog="ptk")      # its subcommands' parsers are CommandParsers too
    p.add_argument("--ngram", type=int_in(1, 64))             # --ngram 0: "must be in [1, 64], got '0'"
    p.add_argument("--workers", type=count_in(1, 4096))       # also 1K, 2M (pretrainkit.quantities)
    p.add_argument("--top-p", type=number_in(0, 1, lo_open=True))
    NGRAM.check(settings["ngram"], "pipeline.yaml: stages[2].dedup.ngram")  # the same range, from a file

argparse answers a bad argument with the command's whole usage block and then the error; here the
error alone, with where the usage is: `ptk tokenize: error: argument --shard-size: must be in [1,
1000000000000], got '0' (see ptk tokenize --help)`, exit status 2. Every number option has a range,
checked when the command line is parsed, before anything is read or written: a value past what the
code can hold (`--min-length 99999999999999999999` once ran a whole dedup, then raised a TypeError)
is refused in that line, and each option's help ends with its range.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import NoReturn

from pretrainkit.errors import UserError, quoted
from pretrainkit.quantities import quantity


@dataclass(frozen=True)
class Bounded:
    """The numbers an option takes, [lo, hi] (or (lo, hi] with `lo_open`): integers unless `integer`
    is false, written with a size suffix (20M, 1.5B) where `suffixes`. An argparse type (the text of
    a command line) with `check` for the same setting given in a YAML file."""

    lo: float
    hi: float
    integer: bool = True
    lo_open: bool = False
    suffixes: bool = False

    def __str__(self) -> str:
        return (
            f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"
            if not self.integer
            else f"[{self.lo}, {self.hi}]"
        )

    def holds(self, value: float) -> bool:
        """Whether `value` lies in the range (nan never does)."""
        above = self.lo < value if self.lo_open else self.lo <= value
        return above and value <= self.hi

    def __call__(self, text: str) -> int | float:
        value = self._parsed(text)
        if not self.holds(value):
            raise argparse.ArgumentTypeError(f"must be in {self}, got {text!r}")
        return value

    def _parsed(self, text: str) -> int | float:
        if self.suffixes:  # counts: positive, as `quantity` says in its words
            value = quantity(text)
            if value != int(value):
                raise argparse.ArgumentTypeError(f"must be a whole number in {self}, got {text!r}")
            return int(value)
        try:
            return int(text) if self.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {self.noun}: {text!r}") from None

    @property
    def noun(self) -> str:
        return "an integer" if self.integer else "a number"

    def check(self, value: object, where: str) -> int | float:
        """`value`, a setting read from a file, or a UserError in one line naming `where` (file and key)."""
        kinds = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not self.holds(value):
            raise UserError(f"{where}: must be {self.noun} in {self}, got {quoted(value)}")
        return value


def int_in(lo: int, hi: int) -> Bounded:
    """Integers in [lo, hi]."""
    return Bounded(lo, hi)


def count_in(lo: int, hi: int) -> Bounded:
    """Whole counts in [lo, hi] (lo >= 1), also written with a size suffix (`32M` tokens, `2G` bytes)."""
    assert lo >= 1, "a count is positive: quantity() refuses 0 in its own words"
    return Bounded(lo, hi, suffixes=True)


def number_in(lo: float, hi: float, lo_open: bool = False) -> Bounded:
    """Numbers in [lo, hi], or (lo, hi] with `lo_open`; nan and the infinities never."""
    return Bounded(lo, hi, integer=False, lo_open=lo_open)


class RangeHelpFormatter(argparse.HelpFormatter):
    """Each number option's help says its range: `--ngram NGRAM  words per shingle (default 5; in [1, 64])`."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help = action.help
        if isinstance(action.type, Bounded) and help and help != argparse.SUPPRESS:
            range_ = f"in {action.type}"
            help = f"{help[:-1]}; {range_})" if help.endswith(")") else f"{help} ({range_})"
        return help


class CommandParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", RangeHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
