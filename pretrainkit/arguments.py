"""The argument parser of every `ptk` command: a bad argument is one line, like every other error.

    parser = CommandParser(prog="ptk")      # its subcommands' parsers are CommandParsers too

argparse answers a bad argument with the command's whole usage block and then the error; here the
error alone, with where the usage is: `ptk tokenize: error: argument --shard-size: must be a
positive number, got '0' (see ptk tokenize --help)`, exit status 2.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class CommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
