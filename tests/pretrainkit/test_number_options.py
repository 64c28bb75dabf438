"""Every number option of every `ptk` command has a range, checked when the command line is parsed
(`pretrainkit.arguments`): a value past it is one line naming the option and the range, exit 2,
before the command has read or written anything (issue 49 item 11: `ptk dedup --paragraphs
--min-length 99999999999999999999` ran the whole dedup, then raised a TypeError)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from pretrainkit.arguments import Bounded, CommandParser, count_in, int_in, number_in
from pretrainkit.cli import build_parser
from pretrainkit.errors import UserError

HUGE = "99999999999999999999"  # past int64 and uint64


def number_options(parser: argparse.ArgumentParser, command: str = "ptk") -> Iterator[tuple[str, argparse.Action]]:
    """(the command, its option) for every option of every command, subcommands included, that is
    not a flag, a choice or a path: what remains takes a number or a list of codes."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from number_options(sub, f"{command} {name}")
        elif action.option_strings and action.type is not None:
            yield command, action


OPTIONS = list(number_options(build_parser([])))
BOUNDED = [(command, a) for command, a in OPTIONS if isinstance(a.type, Bounded)]


def test_every_integer_option_has_a_range() -> None:
    """No option is parsed by a bare int or float: such a type has no range to check."""
    bare = [f"{command} {a.option_strings[-1]}" for command, a in OPTIONS if a.type in (int, float)]
    assert bare == []
    assert len(BOUNDED) >= 40  # the walk does reach every command


def refusal(parser: argparse.ArgumentParser, option: str, value: str, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        parser.parse_args([option, value])  # the type is checked as the option is read, before required ones
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize(("command", "action"), BOUNDED, ids=[f"{c} {a.option_strings[-1]}" for c, a in BOUNDED])
def test_a_huge_or_negative_value_is_one_line_naming_the_option_and_its_range(command, action, capsys) -> None:
    parser = build_parser(command.split()[1:])
    for name in command.split()[1:]:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    option, bounds = action.option_strings[-1], action.type
    values = [HUGE] + (["-1"] if bounds.lo >= 0 else [])
    for value in values:
        line = refusal(parser, option, value, capsys)
        assert line.startswith(f"{command}: error: argument {action.option_strings[0]}"), line
        assert option in line and f"got '{value}'" in line, line
        if value == HUGE or not bounds.suffixes:  # a count's -1 is "must be a positive number", as ever
            assert f"in {bounds}" in line, line
    assert f"in {bounds}" in " ".join(parser.format_help().split())  # and --help says it


def test_the_range_is_read_as_written() -> None:
    assert int_in(8, 1024)("8") == 8 and int_in(8, 1024)("1024") == 1024
    assert count_in(1, 10**12)("32M") == 32_000_000
    assert number_in(0, 1, lo_open=True)("1") == 1.0
    for bounds, text, problem in [
        (int_in(8, 1024), "7", "must be in [8, 1024], got '7'"),
        (int_in(8, 1024), "8.5", "not an integer: '8.5'"),
        (count_in(1, 4096), "1.5", "must be a whole number in [1, 4096], got '1.5'"),
        (count_in(1, 4096), "0", "must be a positive number, got '0'"),
        (number_in(0, 1, lo_open=True), "0", "must be in (0, 1], got '0'"),
        (number_in(0, 1, lo_open=True), "nan", "must be in (0, 1], got 'nan'"),
        (number_in(0, 100), "inf", "must be in [0, 100], got 'inf'"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=problem.replace("(", r"\(").replace("[", r"\[")):
            bounds(text)


def test_a_value_from_a_file_is_checked_against_the_same_range() -> None:
    assert int_in(0, 10)("3") == int_in(0, 10).check(3, "f.yaml: k")
    for value, shown in [(11, "11"), (True, "True"), ("3", "'3'"), (2.5, "2.5")]:
        with pytest.raises(UserError) as e:
            int_in(0, 10).check(value, "f.yaml: stages[0].paragraphs.min_length")
        assert str(e.value) == f"f.yaml: stages[0].paragraphs.min_length: must be an integer in [0, 10], got {shown}"


def test_a_commands_parser_is_a_command_parser() -> None:
    """The help's ranges and the one-line error come from CommandParser: every subcommand's parser is one."""
    stack: list[argparse.ArgumentParser] = [build_parser([])]
    while stack:
        parser = stack.pop()
        assert isinstance(parser, CommandParser), parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
