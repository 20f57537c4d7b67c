"""The agent's world: a workspace, the actions on it, and nothing beyond it."""
from __future__ import annotations

import difflib
import os
import secrets
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mlab.core.actions import ACTION_SPECS, FINAL_ANSWER, ActionSpec
from mlab.core.errors import BudgetExceeded, EnvError, LLMError
from mlab.core.run.llm_actions import LLMActions
from mlab.core.models import Action
from mlab.core.run.readonly import inside, is_read_only, relative_name, resolve_in_workspace
from mlab.core.run.repl import Repl
from mlab.core.sandbox.contract import ExecSpec, Limits, Sandbox
from mlab.core.run.snapshot import SnapshotStore

MAX_READ_BYTES = 2_000_000
MAX_WRITE_BYTES = 20_000_000
MAX_BACKUP_BYTES = MAX_WRITE_BYTES  # larger files are overwritten without a copy for Undo Edit Script
MAX_ARG_CHARS = MAX_WRITE_BYTES
MAX_INSPECT_LINES = 100
MAX_LINE_CHARS = 2_000  # Inspect Script Lines shortens longer lines (a CSV row, minified code)
MAX_LIST_ENTRIES = 1_000
MAX_LOG_BYTES = MAX_READ_BYTES  # Reflection and Retrieval read at most the last this many bytes of the log
_COUNT_BUDGET_BYTES = 256 * 2**20  # Inspect Script Lines counts the file's lines up to this far
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
        name = getattr(action, "name", None)
        try:
            spec, args = self._check(action)
            observation, is_error = self._handlers[spec.name](**args), False
        except EnvError as exc:
            observation, is_error = f"EnvError: {exc}", True
        except LLMError as exc:
            if not exc.context_too_long:
                raise  # the run's model failed for good: the runner ends the run
            observation, is_error = f"EnvError: the text is too long for the model: {exc}", True
        except BudgetExceeded:
            raise
        except OSError as exc:  # the workspace is the agent's: anything can be there
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            where = where.replace(f"{self.workspace}/", "")  # the agent knows workspace paths, not host ones
            observation, is_error = f"EnvError: {name} failed: {exc.strerror or exc}{where}", True
        except Exception as exc:  # a harness bug must not end the run; the agent sees what went wrong
            observation, is_error = f"EnvError: {name} failed unexpectedly: {type(exc).__name__}: {exc}", True
        # Traces and model requests need valid UTF-8; file names and output may not be.
        return observation.encode("utf-8", "backslashreplace").decode("utf-8"), is_error

    def _check(self, action: Action) -> tuple[ActionSpec, dict[str, Any]]:
        actions = self.available_actions()
        name = getattr(action, "name", None)
        if not isinstance(name, str) or name not in actions:
            shown = name if isinstance(name, str) else repr(name)
            raise EnvError(f"unknown action {shown[:200]!r}. Valid actions: {', '.join(actions)}")
        spec = actions[name]
        args = getattr(action, "args", None)
        if not isinstance(args, dict):
            raise EnvError(f"the action input must be a JSON object with the arguments by name, not "
                           f"{type(args).__name__}. Usage: {spec.usage()}")
        missing = [a for a in spec.args if a not in args]
        unknown = [str(a)[:100] for a in args if a not in spec.args]
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {missing}")
            if unknown:
                problems.append(f"unexpected {unknown}")
            raise EnvError(f"wrong arguments for {spec.name} ({'; '.join(problems)}). Usage: {spec.usage()}")
        checked: dict[str, Any] = {}
        for arg, value in args.items():
            if arg.endswith("_line_number"):
                checked[arg] = _line_number(arg, value, spec)
                continue
            if not isinstance(value, str):
                raise EnvError(f"{arg} must be a string, not {type(value).__name__}. Usage: {spec.usage()}")
            if len(value) > MAX_ARG_CHARS:
                raise EnvError(f"{arg} is {len(value)} characters long; at most {MAX_ARG_CHARS} are allowed")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise EnvError(f"{arg} contains characters that are not valid Unicode (lone surrogates)")
            checked[arg] = value
        return spec, checked

    # ---- paths and files ------------------------------------------------------------------------
    def _path(self, given: str) -> Path:
        return resolve_in_workspace(self.workspace, given)

    def _rel(self, path: Path) -> str:
        return relative_name(self.workspace, path)

    def _writable(self, given: str) -> Path:
        path = self._path(given)
        rel = self._rel(path)
        if rel == ".":
            raise EnvError(f"{given!r} is the workspace folder itself, not a file")
        as_given = os.path.normpath(given).replace(os.sep, "/")
        if is_read_only(rel, self.s.read_only_patterns) or is_read_only(as_given, self.s.read_only_patterns):
            raise EnvError(f"{given!r} is read-only: the task does not allow changing it")
        if path.is_dir():
            raise EnvError(f"{given!r} is a folder")
        return path

    def _verify_fd(self, fd: int, given: str) -> None:
        """Refuse an opened file that is not in the workspace after all (a path swapped while we looked)."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # no /proc: the resolved-path check already ran
        if not inside(self.workspace, real):
            raise EnvError(f"path {given!r} points outside the workspace")

    def _open_regular(self, given: str) -> tuple[int, os.stat_result]:
        """An fd of the regular workspace file `given`, opened without following a last-moment symlink."""
        path = self._path(given)
        if not os.path.lexists(path):
            raise EnvError(f"file {given!r} does not exist")
        if path.is_dir():
            raise EnvError(f"{given!r} is a folder, not a file; use List Files to see what it holds")
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise EnvError(f"{given!r} cannot be opened: {exc.strerror}")
        try:
            self._verify_fd(fd, given)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise EnvError(f"{given!r} is not a regular file")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _read_bytes(self, given: str, limit: int, advice: str = "") -> bytes:
        fd, st = self._open_regular(given)
        with os.fdopen(fd, "rb") as f:
            if st.st_size > limit:
                raise EnvError(f"{given!r} is {st.st_size} bytes, more than the {limit} this action handles"
                               + (f"; {advice}" if advice else ""))
            data = f.read(limit + 1)
        if len(data) > limit:  # it grew since fstat
            raise EnvError(f"{given!r} is more than the {limit} bytes this action handles")
        return data

    def _read_text(self, given: str, limit: int = MAX_READ_BYTES,
                   advice: str = "use Inspect Script Lines to read it in parts") -> str:
        data = self._read_bytes(given, limit, advice)
        if b"\x00" in data[:8192]:
            raise EnvError(f"{given!r} is a binary file, not text")
        return data.decode("utf-8", errors="replace")

    def _write_atomic(self, path: Path, data: bytes, given: str) -> None:
        """Replace path with data: other links to the old file are left alone and a reader never sees half."""
        if len(data) > MAX_WRITE_BYTES:
            raise EnvError(f"content of {len(data)} bytes is more than the {MAX_WRITE_BYTES} allowed")
        parent = path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise EnvError(f"cannot create {given!r}: a part of its folder path is a file")
        dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self._verify_fd(dir_fd, given)
            try:
                mode = stat.S_IMODE(os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError:
                mode = 0o644
            tmp = f".{path.name[:100]}.mlab-{secrets.token_hex(4)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dir_fd)
                except OSError:
                    pass
                raise
        finally:
            os.close(dir_fd)

    def _backup(self, path: Path) -> str:
        """Keep the current version of path for Undo Edit Script; returns a note when none was kept."""
        try:
            st = os.lstat(path)
        except OSError:
            return ""
        if not stat.S_ISREG(st.st_mode):
            return ""
        if st.st_size > MAX_BACKUP_BYTES:
            return f"\n(The old version was {st.st_size} bytes, too large to keep: this cannot be undone.)"
        rel = self._rel(path)
        data = self._read_bytes(rel, MAX_BACKUP_BYTES)
        self.backups.setdefault(rel, []).append(self.s.store.store_bytes(data))
        return ""

    def _save(self, path: Path, data: bytes, given: str, keep_backup: bool = True) -> str:
        if len(data) > MAX_WRITE_BYTES:
            raise EnvError(f"content of {len(data)} bytes is more than the {MAX_WRITE_BYTES} allowed")
        note = self._backup(path) if keep_backup else ""
        self._write_atomic(path, data, given)
        return note

    # ---- file actions ---------------------------------------------------------------------------
    def list_files(self, dir_path: str) -> str:
        path = self._path(dir_path)
        if not os.path.lexists(path):
            raise EnvError(f"folder {dir_path!r} does not exist")
        try:
            os.stat(path)
        except OSError as exc:
            raise EnvError(f"{dir_path!r} cannot be opened: {exc.strerror}")
        if not path.is_dir():
            raise EnvError(f"{dir_path!r} is a file, not a folder")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        names = []
        try:
            self._verify_fd(fd, dir_path)
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:  # e.g. a symlink loop
                        is_dir = False
                    names.append(entry.name + ("/" if is_dir else ""))
        finally:
            os.close(fd)
        if not names:
            return "(empty folder)"
        names.sort()
        shown = "\n".join(names[:MAX_LIST_ENTRIES])
        if len(names) > MAX_LIST_ENTRIES:
            shown += f"\n[... and {len(names) - MAX_LIST_ENTRIES} more entries]"
        return shown

    def read_file(self, file_name: str) -> str:
        return self._read_text(file_name)

    def write_file(self, file_name: str, content: str) -> str:
        path = self._writable(file_name)
        note = self._save(path, content.encode("utf-8"), file_name)
        return f"File {file_name} written ({len(content)} characters).{note}"

    def append_file(self, file_name: str, content: str) -> str:
        path = self._writable(file_name)
        old = self._read_bytes(file_name, MAX_WRITE_BYTES) if os.path.lexists(path) else b""
        note = self._save(path, old + content.encode("utf-8"), file_name)
        return f"Appended {len(content)} characters to {file_name}.{note}"

    def copy_file(self, source: str, destination: str) -> str:
        data = self._read_bytes(source, MAX_WRITE_BYTES)
        dst = self._writable(destination)
        note = self._save(dst, data, destination)
        return f"File {source} copied to {destination}.{note}"

    def undo_edit_script(self, script_name: str) -> str:
        path = self._writable(script_name)
        rel = self._rel(path)
        versions = self.backups.get(rel)
        if not versions:
            raise EnvError(f"there is no earlier version of {script_name!r} to go back to")
        try:
            data = self.s.store.read_object(versions[-1])
        except OSError:
            versions.pop()
            raise EnvError(f"the earlier version of {script_name!r} is no longer stored")
        self._write_atomic(path, data, script_name)
        versions.pop()
        if not versions:
            del self.backups[rel]
        try:
            shown = self._read_text(script_name)
        except EnvError as exc:
            shown = f"(not shown: {exc})"
        return f"{script_name} is back to its previous version:\n{shown}"

    def inspect_script_lines(self, script_name: str, start_line_number: int, end_line_number: int) -> str:
        start, end = start_line_number, end_line_number
        if start < 1 or end < start:
            raise EnvError("line numbers start at 1 and the end cannot come before the start")
        if end - start + 1 > MAX_INSPECT_LINES:
            raise EnvError(f"at most {MAX_INSPECT_LINES} lines at a time (asked for {end - start + 1}); "
                           f"e.g. lines {start} to {start + MAX_INSPECT_LINES - 1}")
        fd, _st = self._open_regular(script_name)
        with os.fdopen(fd, "rb") as f:
            if b"\x00" in f.read(8192):
                raise EnvError(f"{script_name!r} is a binary file, not text")
            f.seek(0)
            shown: list[str] = []
            consumed, at_end = 0, True
            for number, (raw, dropped) in enumerate(_lines(f, MAX_LINE_CHARS * 4), start=1):
                consumed = number
                if number > end:
                    at_end = False
                    break
                if number >= start:
                    text = raw.decode("utf-8", errors="replace").rstrip("\r")
                    if len(text) > MAX_LINE_CHARS or dropped:
                        text = text[:MAX_LINE_CHARS] + " [... rest of this long line left out]"
                    shown.append(f"{number}: {text}")
            total, exact = (consumed, True) if at_end else _count_rest(f, consumed)
        count = f"{total} lines" if exact else f"more than {total} lines"
        if not shown:
            if total == 0:
                raise EnvError(f"{script_name!r} is empty")
            raise EnvError(f"{script_name!r} has {count}, so there is no line {start}")
        return (f"{script_name} has {count}. Lines {start} to {start + len(shown) - 1}:\n" + "\n".join(shown))

    def final_answer(self, final_answer: str) -> str:
        return "Final answer submitted; the run ends here."

    def request_help(self, request: str) -> str:
        if not self.s.ask_human:
            raise EnvError("no person is attending this run")
        try:
            answer = self.s.ask_human(request)
        except Exception as exc:
            raise EnvError(f"no answer came from the person attending the run ({type(exc).__name__})")
        return str(answer)

    # ---- running code ---------------------------------------------------------------------------
    def exec_spec(self, timeout_s: float | None = None) -> ExecSpec:
        env = {k: os.environ[k] for k in _ENV_PASSED if k in os.environ}
        writable = []
        if self.s.sandbox_home:
            self.s.sandbox_home.mkdir(parents=True, exist_ok=True)
            writable.append(self.s.sandbox_home)
        home = str(self.s.sandbox_home or self.workspace)
        env.update({"HOME": home, "TMPDIR": home, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
                    "PYTHONDONTWRITEBYTECODE": "1"})
        env.update(self.s.extra_env)
        limits = self.s.limits if timeout_s is None else self.s.limits.model_copy(update={"timeout_s": timeout_s})
        return ExecSpec(cwd=self.workspace, env=env, limits=limits, hidden_paths=self.s.hidden_paths,
                        read_only_paths=self.read_only_paths(), writable_paths=writable)

    def read_only_paths(self) -> list[Path]:
        """The topmost workspace entries matching a read-only pattern; symlinks are not followed."""
        found: list[Path] = []
        stack = [(self.workspace, "")]
        while stack:
            folder, prefix = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                rel = prefix + entry.name
                if is_read_only(rel, self.s.read_only_patterns):
                    found.append(Path(entry.path))
                else:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append((Path(entry.path), rel + "/"))
                    except OSError:
                        pass
        return sorted(found)

    def run_script(self, script_name: str):
        """Run a workspace script in the sandbox; used by Execute Script and by task baselines."""
        path = self._path(script_name)
        if not path.is_file():
            if path.is_dir():
                raise EnvError(f"{script_name!r} is a folder, not a script")
            raise EnvError(f"script {script_name!r} does not exist")
        if path.suffix != ".py":
            raise EnvError(f"only Python scripts (.py) can be executed, not {script_name!r}")
        rel = self._rel(path)
        spec = self.exec_spec()
        before = self._read_only_state()
        try:
            result = self.s.sandbox.run([self.s.python, "-u", "./" + rel if rel.startswith("-") else rel], spec)
        finally:
            self._ensure_workspace()
            changed = self._restore_read_only(before)
        return result, changed

    def _ensure_workspace(self) -> None:
        """A confined script cannot remove the workspace folder (a mount point), an unconfined one can."""
        if not os.path.isdir(self.workspace) or os.path.islink(self.workspace):
            if os.path.lexists(self.workspace):
                os.unlink(self.workspace)
            self.workspace.mkdir(parents=True)

    def execute_script(self, script_name: str) -> str:
        result, changed = self.run_script(script_name)
        note = self._restore_note(changed)
        if result.limit_hit == "timeout":
            raise EnvError(f"the script ran past the time limit of {self.s.limits.timeout_s:g} s and was "
                           f"killed. Output before that:\n{result.output}{note}")
        if result.limit_hit in LIMIT_MESSAGES:
            raise EnvError(f"the script {LIMIT_MESSAGES[result.limit_hit].format(**self._limit_values())} "
                           f"(exit code {result.exit_code}). Output:\n{result.output}{note}")
        status = "" if result.exit_code == 0 else f"\n[exit code {result.exit_code}]"
        return f"The script ran. Output:\n{result.output}{status}{note}"

    def _limit_values(self) -> dict[str, str]:
        limits = self.s.limits
        return {"processes": str(limits.max_processes), "memory": _size(limits.memory_bytes),
                "disk": ", ".join(filter(None, [
                    f"at most {_size(limits.disk_bytes)} more per command" if limits.disk_bytes else "",
                    f"at least {_size(limits.min_free_disk_bytes)} must stay free"
                    if limits.min_free_disk_bytes else ""])),
                "file_size": _size(limits.file_size_bytes), "cpu": f"{limits.cpu_seconds} s"}

    def python_repl(self, command: str) -> str:
        before = self._read_only_state()
        try:
            if self._repl is None:
                self._repl = Repl(self.s.sandbox, self.exec_spec(), self.s.python)
            output = self._repl.run(command, self.s.limits.timeout_s, self.s.limits.output_bytes,
                                    {k: v.format(**self._limit_values()) for k, v in LIMIT_MESSAGES.items()})
        except EnvError as exc:
            self._ensure_workspace()
            raise EnvError(f"{exc}{self._restore_note(self._restore_read_only(before))}")
        self._ensure_workspace()
        return output + self._restore_note(self._restore_read_only(before))

    def _restore_note(self, changed: list[str]) -> str:
        if not changed:
            return ""
        if self.s.pristine_dir:
            return f"\n[read-only files were changed and have been restored: {', '.join(changed)}]"
        return f"\n[read-only files were changed and could not be restored: {', '.join(changed)}]"

    def _read_only_state(self) -> dict[str, tuple[int, ...]]:
        """(type, size, mtime, ctime, inode) of every entry at or below the read-only paths, unfollowed."""
        state: dict[str, tuple[int, ...]] = {}
        stack = list(self.read_only_paths())
        while stack:
            path = stack.pop()
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rel = self._rel(path)
            state[rel] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            if stat.S_ISDIR(st.st_mode):
                try:
                    stack.extend(Path(e.path) for e in os.scandir(path))
                except OSError:
                    pass
        return state

    def _restore_read_only(self, before: dict[str, tuple[int, ...]]) -> list[str]:
        """Belt and braces where the sandbox could not mount read-only: put changed files back."""
        after = self._read_only_state()
        changed = sorted(rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel))
        # Folders only change because something below them did; name the files.
        dirs = {rel for rel in changed if (before.get(rel) or after.get(rel))[0] == stat.S_IFDIR}
        files = [rel for rel in changed if rel not in dirs]
        if self.s.pristine_dir:
            for rel in files:
                self._restore_one(rel)
        return files or sorted(dirs)

    def _restore_one(self, rel: str) -> None:
        """Put back the pristine copy of rel, never following a symlink the script may have planted."""
        current = self.workspace
        parts = rel.split("/")
        for part in parts[:-1]:
            current = current / part
            if os.path.islink(current) or (os.path.lexists(current) and not os.path.isdir(current)):
                os.unlink(current)
            if not os.path.lexists(current):
                source_dir = self.s.pristine_dir / self._rel(current)
                if not source_dir.is_dir():
                    return  # nothing pristine down this path; what the script added is already gone
                os.mkdir(current)
        target = current / parts[-1]
        if os.path.islink(target) or (os.path.lexists(target) and not os.path.isdir(target)):
            os.unlink(target)
        elif os.path.isdir(target):
            shutil.rmtree(target)
        source = self.s.pristine_dir / rel
        if source.is_file():
            shutil.copy2(source, target)
        elif source.is_dir():
            os.mkdir(target)

    # ---- LLM-backed actions ---------------------------------------------------------------------
    def understand_file(self, file_name: str, things_to_look_for: str) -> str:
        text = self._read_text(file_name, advice="Understand File reads files up to that size; "
                               "use Inspect Script Lines for parts of larger ones")
        return self.llm_actions.understand(file_name, text, things_to_look_for)

    def edit_script(self, script_name: str, edit_instruction: str, save_name: str) -> str:
        source = self._path(script_name)
        old = self._read_text(script_name) if os.path.lexists(source) else ""
        target = self._writable(save_name)
        new = self.llm_actions.edit(script_name, old, edit_instruction)
        if not new.strip() and old.strip():
            raise EnvError("the model returned no code, so nothing was saved; try a clearer instruction")
        note = self._save(target, new.encode("utf-8"), save_name)
        return self._diff_report(save_name, old, new) + note

    def edit_script_segment(self, script_name: str, start_line_number: int, end_line_number: int,
                            edit_instruction: str, save_name: str) -> str:
        start, end = start_line_number, end_line_number
        old = self._read_text(script_name)
        lines = old.splitlines(keepends=True)
        if start < 1 or end < start or start > len(lines) + 1:
            raise EnvError(f"lines {start}-{end} are not in {script_name!r}, which has {len(lines)} lines")
        target = self._writable(save_name)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        segment = "".join(lines[start - 1 : end])
        edited = self.llm_actions.edit(script_name, segment, edit_instruction, whole=False)
        if edited and not edited.endswith("\n"):
            edited += "\n"
        new = "".join(lines[: start - 1]) + edited + "".join(lines[end:])
        note = self._save(target, new.encode("utf-8"), save_name)
        return self._diff_report(save_name, old, new) + note

    @staticmethod
    def _diff_report(save_name: str, old: str, new: str) -> str:
        diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                            fromfile=f"{save_name} (before)", tofile=f"{save_name} (after)"))
        return f"The edited file is saved as {save_name}. Check that this diff does what you meant:\n{diff}"

    def _research_log(self) -> str:
        path = self._path(RESEARCH_LOG)
        if not os.path.lexists(path):
            return ""
        fd, st = self._open_regular(RESEARCH_LOG)
        with os.fdopen(fd, "rb") as f:
            if st.st_size > MAX_LOG_BYTES:
                f.seek(st.st_size - MAX_LOG_BYTES)
                return "[... earlier entries left out ...]\n" + f.read(MAX_LOG_BYTES).decode("utf-8", "replace")
            return f.read(MAX_LOG_BYTES).decode("utf-8", "replace")

    def reflection(self, things_to_reflect_on: str) -> str:
        return self.llm_actions.reflect(self._research_log(), things_to_reflect_on)

    def retrieval(self, current_plan: str) -> str:
        return self.llm_actions.retrieve(self._research_log(), current_plan)

    def append_summary(self, content: str) -> str:
        path = self._writable(RESEARCH_LOG)
        old = self._read_bytes(RESEARCH_LOG, MAX_WRITE_BYTES) if os.path.lexists(path) else b""
        self._save(path, old + (content.rstrip("\n") + "\n\n").encode("utf-8"), RESEARCH_LOG, keep_backup=False)
        return f"Added to {RESEARCH_LOG}."

    # ---- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"backups": {k: list(v) for k, v in self.backups.items() if v}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        backups = state.get("backups", {}) if isinstance(state, dict) else {}
        self.backups = {
            str(k): [d for d in v if isinstance(d, str)]
            for k, v in (backups.items() if isinstance(backups, dict) else [])
            if isinstance(v, list) and any(isinstance(d, str) for d in v)
        }

    def close(self) -> None:
        if self._repl is not None:
            self._repl.close()
            self._repl = None


# How a broken limit is told to the agent, after "the script " or "the REPL command ".
LIMIT_MESSAGES = {
    "memory": "hit the memory limit ({memory}) and was stopped",
    "cpu": "used up its CPU time ({cpu}) and was stopped",
    "file_size": "tried to write a file larger than the limit of {file_size} and was stopped",
    "processes": "started more processes or threads than the limit of {processes} allows, so it was killed with "
                 "everything it started",
    "disk": "used too much disk space ({disk}) and was killed with everything it started; delete files you do "
            "not need",
}


def _size(value: int | None) -> str:
    if value is None:
        return "no limit"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value} bytes"


def is_final(action: Action) -> bool:
    return action.name == FINAL_ANSWER


def _line_number(arg: str, value: Any, spec: ActionSpec) -> int:
    """A 1-based line number from an int, an integral float or a string of digits."""
    problem = f"{arg} must be a positive whole number, not {str(value)[:50]!r}. Usage: {spec.usage()}"
    if isinstance(value, bool):
        raise EnvError(problem)
    if isinstance(value, float):
        if not value.is_integer():
            raise EnvError(problem)
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 12 or not all("0" <= c <= "9" for c in text):
            raise EnvError(problem)
        value = int(text)
    if not isinstance(value, int) or value < 0 or value > 10**12:
        raise EnvError(problem)
    return value


def _lines(f, max_bytes: int):
    """(line without its newline, bytes left out) of a binary file, reading at most max_bytes per line."""
    while True:
        piece = f.readline(max_bytes)
        if not piece:
            return
        if piece.endswith(b"\n"):
            yield piece[:-1], 0
            continue
        dropped = 0
        while True:
            more = f.readline(1 << 20)
            if not more:
                break
            dropped += len(more)
            if more.endswith(b"\n"):
                break
        yield piece, dropped


def _count_rest(f, counted: int) -> tuple[int, bool]:
    """Total number of lines given `counted` already read; (count, exact) within a reading budget."""
    total, budget, last = counted, _COUNT_BUDGET_BYTES, b"\n"
    while budget > 0:
        chunk = f.read(min(1 << 20, budget))
        if not chunk:
            return total + (0 if last == b"\n" else 1), True
        total += chunk.count(b"\n")
        last = chunk[-1:]
        budget -= len(chunk)
    return total, False
