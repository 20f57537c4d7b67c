"""The agent's world: a workspace, the actions on it, and nothing beyond it."""
from __future__ import annotations

import difflib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .actions import ACTION_SPECS, FINAL_ANSWER, ActionSpec
from .errors import EnvError, LLMError
from .llm_actions import LLMActions
from .models import Action
from .paths import is_read_only, relative_name, resolve_in_workspace
from .repl import Repl
from .sandbox import ExecSpec, Limits, Sandbox
from .snapshot import SnapshotStore

MAX_READ_BYTES = 2_000_000
MAX_WRITE_BYTES = 20_000_000
MAX_INSPECT_LINES = 100
RESEARCH_LOG = "research_log.log"
# Only these variables of the harness reach agent code; everything else (API keys above all) is dropped.
_ENV_PASSED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class EnvSettings:
    workspace: Path
    read_only_patterns: list[str]
    sandbox: Sandbox
    store: SnapshotStore
    pristine_dir: Path | None = None  # where read-only files are restored from if a script changes them
    hidden_paths: list[Path] = field(default_factory=list)
    sandbox_home: Path | None = None
    limits: Limits = field(default_factory=Limits)
    llm: Any = None
    interactive: bool = False
    ask_human: Callable[[str], str] | None = None
    python: str = sys.executable
    extra_env: dict[str, str] = field(default_factory=dict)


class Environment:
    def __init__(self, settings: EnvSettings):
        self.s = settings
        self.workspace = settings.workspace.resolve()
        self.backups: dict[str, list[str]] = {}  # file -> digests of earlier versions, newest last
        self.llm_actions = LLMActions(settings.llm)
        self._repl: Repl | None = None
        self._handlers: dict[str, Callable[..., str]] = {
            "List Files": self.list_files,
            "Read File": self.read_file,
            "Write File": self.write_file,
            "Append File": self.append_file,
            "Copy File": self.copy_file,
            "Undo Edit Script": self.undo_edit_script,
            "Execute Script": self.execute_script,
            "Python REPL": self.python_repl,
            "Final Answer": self.final_answer,
            "Understand File": self.understand_file,
            "Inspect Script Lines": self.inspect_script_lines,
            "Edit Script (AI)": self.edit_script,
            "Edit Script Segment (AI)": self.edit_script_segment,
            "Reflection": self.reflection,
            "Retrieval from Research Log": self.retrieval,
            "Append Summary to Research Log": self.append_summary,
            "Request Help": self.request_help,
        }

    # ---- dispatch -------------------------------------------------------------------------------
    def available_actions(self) -> dict[str, ActionSpec]:
        return {n: s for n, s in ACTION_SPECS.items() if self.s.interactive or not s.interactive_only}

    def execute(self, action: Action) -> tuple[str, bool]:
        """Run one action; returns (observation, is_error). Never raises on agent input."""
        try:
            spec = self._check(action)
            return self._handlers[spec.name](**action.args), False
        except EnvError as exc:
            return f"EnvError: {exc}", True
        except LLMError as exc:
            if exc.context_too_long:
                return f"EnvError: the text is too long for the model: {exc}", True
            raise

    def _check(self, action: Action) -> ActionSpec:
        actions = self.available_actions()
        if not isinstance(action.name, str) or action.name not in actions:
            raise EnvError(f"unknown action {action.name!r}. Valid actions: {', '.join(actions)}")
        spec = actions[action.name]
        args = action.args
        if not isinstance(args, dict):
            raise EnvError(f"the input must be a JSON object. Usage: {spec.usage()}")
        missing = [a for a in spec.args if a not in args]
        unknown = [a for a in args if a not in spec.args]
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {missing}")
            if unknown:
                problems.append(f"unexpected {unknown}")
            raise EnvError(f"wrong arguments for {spec.name} ({'; '.join(problems)}). Usage: {spec.usage()}")
        for name, value in args.items():
            if name.endswith("_line_number"):
                if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
                    raise EnvError(f"{name} must be a positive whole number. Usage: {spec.usage()}")
            elif not isinstance(value, str):
                raise EnvError(f"{name} must be a string, not {type(value).__name__}. Usage: {spec.usage()}")
        return spec

    # ---- paths ----------------------------------------------------------------------------------
    def _path(self, given: str) -> Path:
        return resolve_in_workspace(self.workspace, given)

    def _writable(self, given: str) -> Path:
        path = self._path(given)
        rel = relative_name(self.workspace, path)
        if rel == "." or is_read_only(rel, self.s.read_only_patterns):
            raise EnvError(f"{given!r} is read-only")
        if path.is_dir():
            raise EnvError(f"{given!r} is a folder")
        return path

    def _read_text(self, given: str, limit: int = MAX_READ_BYTES) -> str:
        path = self._path(given)
        if not path.exists():
            raise EnvError(f"file {given!r} does not exist")
        if not path.is_file():
            raise EnvError(f"{given!r} is not a file")
        size = path.stat().st_size
        if size > limit:
            raise EnvError(f"{given!r} is {size} bytes, more than the {limit} this action reads; "
                           "use Inspect Script Lines or Understand File")
        data = path.read_bytes()
        if b"\x00" in data[:8192]:
            raise EnvError(f"{given!r} is a binary file")
        return data.decode("utf-8", errors="replace")

    def _save(self, path: Path, text: str, keep_backup: bool) -> None:
        data = text.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise EnvError(f"content of {len(data)} bytes is more than the {MAX_WRITE_BYTES} allowed")
        rel = relative_name(self.workspace, path)
        if keep_backup and path.is_file():
            self.backups.setdefault(rel, []).append(self.s.store.store_bytes(path.read_bytes()))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    # ---- file actions ---------------------------------------------------------------------------
    def list_files(self, dir_path: str) -> str:
        path = self._path(dir_path)
        if not path.is_dir():
            raise EnvError(f"folder {dir_path!r} does not exist")
        names = sorted(e.name + ("/" if e.is_dir() else "") for e in os.scandir(path))
        return "\n".join(names) if names else "(empty folder)"

    def read_file(self, file_name: str) -> str:
        return self._read_text(file_name)

    def write_file(self, file_name: str, content: str) -> str:
        self._save(self._writable(file_name), content, keep_backup=True)
        return f"File {file_name} written ({len(content)} characters)."

    def append_file(self, file_name: str, content: str) -> str:
        path = self._writable(file_name)
        old = self._read_text(file_name) if path.exists() else ""
        self._save(path, old + content, keep_backup=True)
        return f"Appended {len(content)} characters to {file_name}."

    def copy_file(self, source: str, destination: str) -> str:
        src = self._path(source)
        if not src.is_file():
            raise EnvError(f"file {source!r} does not exist")
        dst = self._writable(destination)
        if src.stat().st_size > MAX_WRITE_BYTES:
            raise EnvError(f"{source!r} is larger than the {MAX_WRITE_BYTES} bytes allowed")
        rel = relative_name(self.workspace, dst)
        if dst.is_file():
            self.backups.setdefault(rel, []).append(self.s.store.store_bytes(dst.read_bytes()))
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        return f"File {source} copied to {destination}."

    def undo_edit_script(self, script_name: str) -> str:
        path = self._writable(script_name)
        rel = relative_name(self.workspace, path)
        if not self.backups.get(rel):
            raise EnvError(f"there is no earlier version of {script_name!r} to go back to")
        path.write_bytes(self.s.store.read_object(self.backups[rel].pop()))
        return f"{script_name} is back to its previous version:\n" + self._read_text(script_name)

    def inspect_script_lines(self, script_name: str, start_line_number, end_line_number) -> str:
        start, end = int(start_line_number), int(end_line_number)
        if start < 1 or end < start:
            raise EnvError("line numbers start at 1 and the end cannot come before the start")
        if end - start + 1 > MAX_INSPECT_LINES:
            raise EnvError(f"at most {MAX_INSPECT_LINES} lines at a time (asked for {end - start + 1})")
        lines = self._read_text(script_name).splitlines()
        shown = lines[start - 1 : end]
        body = "\n".join(f"{start + i}: {line}" for i, line in enumerate(shown))
        return f"{script_name} has {len(lines)} lines. Lines {start} to {start + len(shown) - 1}:\n{body}"

    def final_answer(self, final_answer: str) -> str:
        return "Final answer submitted; the run ends here."

    def request_help(self, request: str) -> str:
        if not self.s.ask_human:
            raise EnvError("no person is attending this run")
        return self.s.ask_human(request)

    # ---- running code ---------------------------------------------------------------------------
    def exec_spec(self, timeout_s: float | None = None) -> ExecSpec:
        env = {k: os.environ[k] for k in _ENV_PASSED if k in os.environ}
        home = str(self.s.sandbox_home or self.workspace)
        env.update({"HOME": home, "TMPDIR": home, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
                    "PYTHONDONTWRITEBYTECODE": "1"})
        env.update(self.s.extra_env)
        limits = self.s.limits if timeout_s is None else self.s.limits.model_copy(update={"timeout_s": timeout_s})
        return ExecSpec(cwd=self.workspace, env=env, limits=limits, hidden_paths=self.s.hidden_paths,
                        read_only_paths=self.read_only_paths())

    def read_only_paths(self) -> list[Path]:
        found = []
        for entry in sorted(self.workspace.rglob("*")):
            rel = entry.relative_to(self.workspace).as_posix()
            if is_read_only(rel, self.s.read_only_patterns) and not any(p in entry.parents for p in found):
                found.append(entry)
        return found

    def run_script(self, script_name: str):
        """Run a workspace script in the sandbox; used by Execute Script and by task baselines."""
        path = self._path(script_name)
        if not path.is_file():
            raise EnvError(f"script {script_name!r} does not exist")
        if path.suffix != ".py":
            raise EnvError(f"only Python scripts (.py) can be executed, not {script_name!r}")
        if self.s.sandbox_home:
            self.s.sandbox_home.mkdir(parents=True, exist_ok=True)
        before = self._read_only_state()
        result = self.s.sandbox.run([self.s.python, "-u", relative_name(self.workspace, path)], self.exec_spec())
        changed = self._restore_read_only(before)
        return result, changed

    def execute_script(self, script_name: str) -> str:
        result, changed = self.run_script(script_name)
        note = ""
        if changed:
            note = f"\n[read-only files were changed by the script and have been restored: {', '.join(changed)}]"
        if result.limit_hit == "timeout":
            raise EnvError(f"the script ran past the time limit of {self.s.limits.timeout_s:g} s and was "
                           f"killed. Output before that:\n{result.output}{note}")
        if result.limit_hit in ("memory", "cpu", "file_size"):
            raise EnvError(f"the script hit the {result.limit_hit} limit (exit code {result.exit_code}). "
                           f"Output:\n{result.output}{note}")
        status = "" if result.exit_code == 0 else f"\n[exit code {result.exit_code}]"
        return f"The script ran. Output:\n{result.output}{status}{note}"

    def python_repl(self, command: str) -> str:
        if self._repl is None:
            self._repl = Repl(self.s.sandbox, self.exec_spec(), self.s.python)
        return self._repl.run(command, self.s.limits.timeout_s, self.s.limits.output_bytes)

    def _read_only_state(self) -> dict[str, tuple[int, int]]:
        state = {}
        for path in self.read_only_paths():
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for f in files:
                st = f.lstat()
                state[f.relative_to(self.workspace).as_posix()] = (st.st_size, st.st_mtime_ns)
        return state

    def _restore_read_only(self, before: dict[str, tuple[int, int]]) -> list[str]:
        """Belt and braces where the sandbox could not mount read-only: put changed files back."""
        after = self._read_only_state()
        changed = sorted(rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel))
        if changed and self.s.pristine_dir:
            for rel in changed:
                source = self.s.pristine_dir / rel
                target = self.workspace / rel
                if target.is_symlink() or target.exists():
                    target.unlink() if not target.is_dir() or target.is_symlink() else shutil.rmtree(target)
                if source.is_file():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, target)
        return changed

    # ---- LLM-backed actions ---------------------------------------------------------------------
    def understand_file(self, file_name: str, things_to_look_for: str) -> str:
        return self.llm_actions.understand(file_name, self._read_text(file_name), things_to_look_for)

    def edit_script(self, script_name: str, edit_instruction: str, save_name: str) -> str:
        source = self._path(script_name)
        old = self._read_text(script_name) if source.exists() else ""
        target = self._writable(save_name)
        new = self.llm_actions.edit(script_name, old, edit_instruction)
        self._save(target, new, keep_backup=True)
        return self._diff_report(save_name, old, new)

    def edit_script_segment(self, script_name: str, start_line_number, end_line_number,
                            edit_instruction: str, save_name: str) -> str:
        start, end = int(start_line_number), int(end_line_number)
        old = self._read_text(script_name)
        lines = old.splitlines(keepends=True)
        if start < 1 or end < start or start > len(lines) + 1:
            raise EnvError(f"lines {start}-{end} are not in {script_name!r}, which has {len(lines)} lines")
        target = self._writable(save_name)
        segment = "".join(lines[start - 1 : end])
        edited = self.llm_actions.edit(script_name, segment, edit_instruction, whole=False)
        if edited and not edited.endswith("\n"):
            edited += "\n"
        new = "".join(lines[: start - 1]) + edited + "".join(lines[end:])
        self._save(target, new, keep_backup=True)
        return self._diff_report(save_name, old, new)

    @staticmethod
    def _diff_report(save_name: str, old: str, new: str) -> str:
        diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                            fromfile=f"{save_name} (before)", tofile=f"{save_name} (after)"))
        return f"The edited file is saved as {save_name}. Check that this diff does what you meant:\n{diff}"

    def _research_log(self) -> str:
        path = self.workspace / RESEARCH_LOG
        return path.read_text(errors="replace") if path.is_file() else ""

    def reflection(self, things_to_reflect_on: str) -> str:
        return self.llm_actions.reflect(self._research_log(), things_to_reflect_on)

    def retrieval(self, current_plan: str) -> str:
        return self.llm_actions.retrieve(self._research_log(), current_plan)

    def append_summary(self, content: str) -> str:
        path = self.workspace / RESEARCH_LOG
        with open(path, "a", encoding="utf-8") as f:
            f.write(content.rstrip("\n") + "\n\n")
        return f"Added to {RESEARCH_LOG}."

    # ---- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"backups": {k: list(v) for k, v in self.backups.items() if v}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.backups = {k: list(v) for k, v in state.get("backups", {}).items()}

    def close(self) -> None:
        if self._repl is not None:
            self._repl.close()


def is_final(action: Action) -> bool:
    return action.name == FINAL_ANSWER
