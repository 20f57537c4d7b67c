"""Running agent code in the sandbox: Execute Script and the Python REPL."""
from __future__ import annotations

import functools
import os
import re
import sysconfig
from collections.abc import Callable
from pathlib import Path

from mlab.core.errors import EnvError
from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.limit_messages import limit_messages
from mlab.core.run.read_only_guard import FolderId, ReadOnlyGuard, Survey
from mlab.core.run.repl import Repl
from mlab.core.run.workspace import Workspace
from mlab.core.sandbox.spec import ExecResult, ExecSpec

# Only these variables of the harness reach agent code; everything else (API keys above all) is dropped.
_ENV_PASSED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
TRACEBACK = "Traceback (most recent call last):"


class FailedOutput(str):
    """The observation of code that failed (a non-zero exit, a traceback): shown like any output, and recorded
    in the trace as an error."""


def _failed(text: str, failed: bool) -> str:
    return FailedOutput(text) if failed else text


def _variants(folder: str | os.PathLike[str], shown: str) -> list[tuple[str, str]]:
    return [(variant.rstrip("/") + "/", shown) for variant in {str(folder), os.path.realpath(folder)}]


@functools.lru_cache(maxsize=1)
def interpreter_prefixes() -> tuple[tuple[str, str], ...]:
    """This interpreter's library folders (the same for every run of a process: found once, in a bench's
    zygote before it forks its runs)."""
    paths = sysconfig.get_paths()
    return tuple(pair for key, shown in (("purelib", "<site-packages>/"), ("platlib", "<site-packages>/"),
                                         ("stdlib", "<python>/")) if paths.get(key)
                 for pair in _variants(paths[key], shown))


class ScriptRunner:
    def __init__(self, settings: EnvSettings, workspace: Workspace):
        self.settings = settings
        self.workspace = workspace
        self.guard = ReadOnlyGuard(settings, workspace)
        self.repl: Repl | None = None  # started by the first Python REPL command
        self._repl_sealed: dict[str, FolderId] = {}  # folders the REPL's sandbox mounted read-only at its start
        self.on_output: Callable[[bytes], None] | None = None  # sees a script's output as it comes
        self._host_prefixes = self._prefixes()

    def _prefixes(self) -> list[tuple[str, str]]:
        """Host folders as agent code's output shows them, longest first, with what the agent is shown instead:
        workspace files by their workspace-relative names, the rest by a short name that gives nothing away."""
        pairs = list(interpreter_prefixes())
        for folder, shown in ((self.workspace.root, ""), (self.settings.sandbox_home, "~/")):
            if folder is not None:
                pairs += _variants(folder, shown)
        return sorted(set(pairs), key=lambda pair: len(pair[0]), reverse=True)

    def relative_paths(self, text: str) -> str:
        """Output with host paths replaced: `File "/host/runs/x/workspace/train.py"` becomes `File "train.py"`."""
        for prefix, shown in self._host_prefixes:
            text = text.replace(prefix, shown)
        root = str(self.workspace.root)
        for variant in {root, os.path.realpath(root)}:  # the workspace itself (os.getcwd()) is "."
            text = re.sub(re.escape(variant) + r"(?![\w.-])", ".", text)
        return text

    def exec_spec(self, timeout_s: float | None = None, survey: Survey | None = None) -> ExecSpec:
        """How agent code runs; `survey`, when the caller has one, saves walking the read-only files again."""
        s = self.settings
        env = {k: os.environ[k] for k in _ENV_PASSED if k in os.environ}
        writable = []
        if s.sandbox_home:
            s.sandbox_home.mkdir(parents=True, exist_ok=True)
            writable.append(s.sandbox_home)
        home = str(s.sandbox_home or self.workspace.root)
        env.update({"HOME": home, "TMPDIR": home, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
                    "PYTHONDONTWRITEBYTECODE": "1"})
        env.update(s.extra_env)
        limits = s.limits if timeout_s is None else s.limits.model_copy(update={"timeout_s": timeout_s})
        return ExecSpec(cwd=self.workspace.root, env=env, limits=limits, hidden_paths=s.hidden_paths,
                        read_only_paths=self._mounts(survey or self.guard.survey()), writable_paths=writable,
                        network=s.network)

    def _mounts(self, survey: Survey) -> list[Path]:
        return [self.workspace.root / rel for rel in survey.mounts]

    def read_only_paths(self) -> list[Path]:
        return self.guard.paths()

    def run_script(self, script_name: str) -> tuple[ExecResult, list[str]]:
        """Run a workspace script in the sandbox; returns (ExecResult, read-only files it changed)."""
        path = self.workspace.path(script_name)
        if not path.is_file():
            if path.is_dir():
                raise EnvError(f"{script_name!r} is a folder, not a script")
            raise EnvError(f"script {script_name!r} does not exist")
        if path.suffix != ".py":
            raise EnvError(f"only Python scripts (.py) can be executed, not {script_name!r}")
        rel = self.workspace.rel(path)
        before = self.guard.survey()
        spec = self.exec_spec(survey=before)
        changes = self.settings.store.changes
        changes.ran_agent_code()  # the next snapshot must look at everything the code could change
        try:
            # "./" keeps a script named like "-c.py" from being read as an interpreter option.
            argv = [self.settings.python, "-u", "./" + rel if rel.startswith("-") else rel]
            result = self.settings.sandbox.run(argv, spec, self.on_output)
        finally:
            self.workspace.recreate_if_removed()
            outcome = self.guard.restore(before)
            # Nothing of a script outlives it (the sandbox killed its tree): the kernel's change events name all
            # it changed, confined; unconfined, with a watch on each file's inode (another hard link).
            changes.code_ended(outcome.intact, confined=bool(getattr(self.settings.sandbox, "confined", False)),
                               reaped=True)
        return result, outcome.changed

    def execute_script(self, script_name: str) -> str:
        result, changed = self.run_script(script_name)
        note = self.guard.note(changed)
        limits = self.settings.limits
        output = self.relative_paths(result.output)
        if result.limit_hit == "timeout":
            raise EnvError(f"the script ran past the time limit of {limits.timeout_s:g} s and was "
                           f"killed. Output before that:\n{output}{note}")
        messages = limit_messages(limits)
        if result.limit_hit in messages:
            raise EnvError(f"the script {messages[result.limit_hit]} "
                           f"(exit code {result.exit_code}). Output:\n{output}{note}")
        status = "" if result.exit_code == 0 else f"\n[exit code {result.exit_code}]"
        failed = result.exit_code != 0 or TRACEBACK in output
        return _failed(f"The script ran. Output:\n{output}{status}{note}", failed)

    def python_repl(self, command: str) -> str:
        s = self.settings
        if self.repl is None:
            before = self.guard.survey()
        else:  # the REPL keeps the mounts it started with
            before = self.guard.look(self._repl_sealed)
        changes = self.settings.store.changes
        changes.ran_agent_code()  # the next snapshot must look at everything the code could change
        try:
            if self.repl is None:
                self.repl = Repl(s.sandbox, self.exec_spec(survey=before), s.python)
                self._repl_sealed = dict(before.sealed)
            output = self.repl.run(command, s.limits.timeout_s, s.limits.output_bytes, limit_messages(s.limits))
        except EnvError as exc:
            self.workspace.recreate_if_removed()
            raise EnvError(f"{self.relative_paths(str(exc))}{self._restore_note(before)}") from exc
        self.workspace.recreate_if_removed()
        output = self.relative_paths(output)
        return _failed(output + self._restore_note(before), TRACEBACK in output)

    def _restore_note(self, before: Survey) -> str:
        outcome = self.guard.restore(before)
        self.settings.store.changes.code_ended(outcome.intact)
        return self.guard.note(outcome.changed)

    def close(self) -> None:
        if self.repl is not None:
            self.repl.close()
            self.repl = None
        self.guard.close()
