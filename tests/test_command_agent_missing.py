"""Issue 44, item 10: `--agent command` naming a program that is not here is refused in one line, exit 2, before
the run writes anything (it used to start the run, end it at step 1 with a traceback as the observation, exit 0)."""
from __future__ import annotations

from tests.fixtures.cli import mlab_in_process


def test_a_command_agent_whose_program_is_missing_is_refused_in_one_line_with_nothing_written(tmp_path):
    (tmp_path / "none.jsonl").write_text("[]\n")
    for command, missing in (("no-such-program-xyz --flag", "no-such-program-xyz"),
                             ("python missing_agent.py", "missing_agent.py"),
                             (f"{tmp_path}/missing.sh", "missing.sh"), ("./missing_agent.py --x", "missing_agent.py")):
        run_dir = tmp_path / "run"
        shown = mlab_in_process("run", "--task", "lite/wine", "--agent", "command", "--agent-option",
                                f"command={command}", "--llm", f"scripted:{tmp_path / 'none.jsonl'}",
                                "--run-dir", run_dir, "--sandbox", "local", home=tmp_path / "home", cwd=tmp_path)
        assert shown.returncode == 2, (command, shown.stdout, shown.stderr)
        assert len(shown.stderr.strip().splitlines()) == 1 and "Traceback" not in shown.stderr, shown.stderr
        assert missing in shown.stderr and "not found" in shown.stderr, shown.stderr
        assert not run_dir.exists() and not shown.stdout, shown.stdout


def test_a_command_agent_whose_program_is_here_or_on_the_path_is_not_refused():
    from mlab.core.agent_program import check_program
    from mlab_agent_command.agent import CommandAgent

    for command in ("python -m my_agent", "python -c 'print(1)'", "sh -c 'echo hi'", "python3 -u -m x",
                    f"python {__file__}", __file__):
        check_program(CommandAgent, {"command": command})
