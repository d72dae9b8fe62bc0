"""The lazy command table (runner/cli/app.py COMMANDS) is the whole, true command list.

`wfrun --help` renders the table without importing any command module (issue 15, cold
start), so each line must be what the command's own docstring gives, and a command
module that someone adds without a table line must fail here.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import click
from click.testing import CliRunner

import runner.cli
from runner.cli.app import COMMANDS, cli


def _load_every_command_module() -> None:
    for info in pkgutil.iter_modules(runner.cli.__path__):
        importlib.import_module(f"runner.cli.{info.name}")


def test_the_table_lists_every_command_with_its_module_and_docstring_help() -> None:
    _load_every_command_module()
    assert sorted(cli.commands) == sorted(COMMANDS), "update COMMANDS in runner/cli/app.py"
    for name, command in cli.commands.items():
        module, short_help = COMMANDS[name]
        assert command.callback is not None
        fix = f"'{name}': update COMMANDS in runner/cli/app.py"
        assert command.callback.__module__ == f"runner.cli.{module}", fix
        # The first sentence of the docstring, unshortened: what click would list.
        assert short_help == command.get_short_help_str(limit=10_000), fix


LOAD_ALL_THEN_HELP = (
    "import importlib, pkgutil, sys; import runner.cli\n"
    "for m in pkgutil.iter_modules(runner.cli.__path__):\n"
    "    importlib.import_module('runner.cli.' + m.name)\n"
    "sys.argv = ['wfrun', '--help']\n"
    "from runner.cli.app import main; main()\n")


def test_help_from_the_table_matches_help_from_the_loaded_commands() -> None:
    """`wfrun --help` lists the commands from the table; with every module loaded first,
    click lists them from the real commands: the two texts are the same."""
    env = {"COLUMNS": "80", "PATH": "/usr/bin"}
    lazy = subprocess.run([sys.executable, "-m", "runner", "--help"], capture_output=True,
                          text=True, timeout=60, env=env)
    loaded = subprocess.run([sys.executable, "-c", LOAD_ALL_THEN_HELP], capture_output=True,
                            text=True, timeout=60, env=env)
    assert lazy.returncode == 0, lazy.stderr
    assert loaded.returncode == 0, loaded.stderr
    assert lazy.stdout == loaded.stdout
    assert "  validate     Validate workflows (all of them when no name is given).\n" \
        in lazy.stdout
    assert "  answer       Continue a waiting run as a new linked run, with the...\n" \
        in lazy.stdout


def test_an_unknown_command_is_a_usage_error_and_a_known_one_loads_on_use() -> None:
    result = CliRunner().invoke(cli, ["nosuch"], prog_name="wfrun")
    assert result.exit_code == 2
    assert "No such command 'nosuch'" in result.output
    ctx = click.Context(cli)
    command = cli.get_command(ctx, "schema")
    assert command is not None
    assert command.name == "schema"
    assert "runner.cli.definitions" in sys.modules
