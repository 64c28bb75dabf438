"""`ptk`'s command table: a command's module alone is imported to run it, so the table must name
every command each module registers, and nothing else."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

from pretrainkit import cli
from pretrainkit.arguments import CommandParser


def test_the_table_names_what_each_module_registers() -> None:
    for module in cli.COMMAND_MODULES:
        sub = CommandParser(prog="ptk").add_subparsers(dest="command")
        importlib.import_module(module).register(sub)
        assert sorted(sub.choices) == sorted(c for c, m in cli.COMMANDS.items() if m == module), module


def test_a_command_imports_only_its_module_and_help_lists_them_all() -> None:
    script = (
        "import json, sys; from pretrainkit import cli; "
        "cli.build_parser(['shards', 'verify', 'x']); "
        "print(json.dumps([sorted(m for m in cli.COMMAND_MODULES if m in sys.modules), 'numba' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [["pretrainkit.shards.cli"], False], out
    helped = subprocess.run([sys.executable, "-m", "pretrainkit.cli", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and all(command in helped.stdout for command in cli.COMMANDS), helped.stdout
