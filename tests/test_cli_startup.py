"""`mlab --help` imports click alone, and a command imports only its own module."""
from __future__ import annotations

import subprocess
import sys

import click
import pytest

from mlab.cli.main import COMMANDS, cli, load_command

PROBE = ("import sys\nfrom mlab.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         "print('MODULES', ' '.join(sorted(sys.modules)))")


def imported_by(*args: str) -> set[str]:
    """The modules loaded by the time `mlab ARGS` ends, in a fresh interpreter."""
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(result.stdout.rsplit("MODULES ", 1)[1].split())


def test_mlab_help_imports_no_command_module_pydantic_or_rich():
    modules = imported_by("--help")
    heavy = sorted(m for m in modules if m.split(".")[0] in ("pydantic", "rich", "pluggy")
                   or m.startswith("mlab.core") or m.endswith("_cmds"))
    assert heavy == []


def test_a_commands_help_imports_its_own_module_only():
    modules = imported_by("tasks", "--help")
    assert "mlab.cli.inspect_cmds" in modules
    assert sorted(m for m in modules if m.endswith("_cmds")) == ["mlab.cli.inspect_cmds"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listing_says_what_each_command_says_of_itself(name):
    command = load_command(name)
    assert command.name == name
    assert COMMANDS[name][2] == command.get_short_help_str(limit=150)


def test_an_unknown_command_is_a_usage_error():
    ctx = click.Context(cli)
    assert cli.get_command(ctx, "nosuch") is None
    result = subprocess.run([sys.executable, "-m", "mlab.cli.main", "nosuch"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and "No such command" in result.stderr and "Traceback" not in result.stderr
