"""Taking in a loose submission (`mlab grade`): the file or folder is untrusted, so its kinds and sizes are
checked before a byte is copied, and the scratch copy never outlives the command.

A folder may hold regular files, folders and links that stay inside it; a FIFO, socket or device, a link out of
it, the file the task reads as its submission (a file given alone, or `submission_files` in a folder) over the
task's cap (its apparent size or the blocks it holds, so a sparse file cannot be written out dense) and a folder
whose files add up past the folder cap are each named on a line of their own, and nothing is copied. Other files of
a folder are held only to the folder's cap, since a workspace may hold more than the file the task reads (a saved
model its scorer loads); holes stay holes when copied. Each file is checked again through the descriptor it is
copied from (fstat), and no more than the size checked is copied, so a file grown or swapped since the survey
costs no writes either. The scratch folder is removed when the block ends, and a watchdog process removes it if
this process is killed outright (kill -9) before it could.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlab.core.errors import MlabError

# What a folder submission (a workspace) may hold in all: a saved model is bigger than a predictions file.
FOLDER_MAX_BYTES = int(os.environ.get("MLAB_GRADE_MAX_BYTES", 8 * 2**30))
MAX_ENTRIES = 200_000
MAX_DEPTH = 64
SHM_MAX_BYTES = 64 * 2**20  # small submissions are scored in memory (see scoring._scratch_root)
SUBMISSION_FILE = "submission.csv"

# The watchdog: waits for its stdin to close (this process ended, however), then removes the folder.
_WATCHDOG = "import shutil, sys\nsys.stdin.buffer.read()\nshutil.rmtree(sys.argv[1], ignore_errors=True)\n"


class SubmissionRefused(MlabError):
    """A submission mlab will not copy; one line per bad file."""


def _size(st: os.stat_result) -> int:
    """What a file costs to copy: its apparent size, or the blocks it holds when more (preallocated)."""
    return max(st.st_size, st.st_blocks * 512)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def submission_files(task: object) -> frozenset[str]:
    """The files, relative to a graded folder, that the task reads as its submission and refuses over its
    max_submission_bytes: submission.csv (every built-in task's), its validation split's and a task.yaml's."""
    names = {SUBMISSION_FILE}
    split = getattr(task, "validation", None)
    if isinstance(getattr(split, "submission", None), str):
        names.add(split.submission)  # type: ignore[union-attr]
    table = getattr(getattr(task, "spec", None), "submission_table", None)  # a declarative task's
    if isinstance(getattr(table, "file", None), str):
        names.add(table.file)  # type: ignore[union-attr]
    return frozenset(os.path.normpath(name) for name in names)


def _refusal(shown: str, size: int, cap: int) -> str:
    return f"{shown}: {size} bytes, more than the task's {cap}"


def survey(path: Path, max_file_bytes: int, max_total_bytes: int = FOLDER_MAX_BYTES,
           capped: frozenset[str] = frozenset()) -> tuple[int, list[str]]:
    """(bytes a copy would write, one line per bad entry) for a submission file or folder, read without
    following links and without opening any file; in a folder, the files named in `capped` (relative to it) are
    held to max_file_bytes."""
    path = Path(path)
    problems: list[str] = []
    try:
        st = os.stat(path)  # the path the user named may itself be a link: theirs to give
    except OSError as exc:
        return 0, [f"{path}: cannot be read: {exc.strerror or exc}"]
    if stat.S_ISREG(st.st_mode):
        if _size(st) > max_file_bytes:
            problems.append(_refusal(str(path), _size(st), max_file_bytes))
        return _size(st), problems
    if not stat.S_ISDIR(st.st_mode):
        return 0, [f"{path}: {_kind(st.st_mode)}; give a regular file or a folder"]
    root = os.path.realpath(path)
    total, entries, oversized = 0, 0, False
    pending: list[tuple[str, int]] = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as listing:
                children = list(listing)
        except OSError as exc:
            problems.append(f"{folder}: cannot be read: {exc.strerror or exc}")
            continue
        for entry in children:
            entries += 1
            if entries > MAX_ENTRIES:
                return total, [*problems, f"{path}: more than {MAX_ENTRIES} entries"]
            shown = os.path.join(str(path), os.path.relpath(entry.path, root))
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                problems.append(f"{shown}: cannot be read: {exc.strerror or exc}")
                continue
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= MAX_DEPTH:
                    problems.append(f"{shown}: folders nested more than {MAX_DEPTH} deep")
                else:
                    pending.append((entry.path, depth + 1))
            elif stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(entry.path)
                if not (real == root or real.startswith(root + os.sep)):
                    problems.append(f"{shown}: a link out of the submission (to {os.readlink(entry.path)})")
            elif stat.S_ISREG(st.st_mode):
                total += _size(st)
                if _size(st) > max_file_bytes and os.path.relpath(entry.path, root) in capped:
                    problems.append(_refusal(shown, _size(st), max_file_bytes))
                elif _size(st) > max_total_bytes:
                    oversized = True
                    problems.append(f"{shown}: {_size(st)} bytes, more than the {max_total_bytes} a submission "
                                    "folder may hold")
            else:
                problems.append(f"{shown}: {_kind(st.st_mode)}")
    if total > max_total_bytes and not oversized:
        problems.append(f"{path}: its files hold {total} bytes, more than the {max_total_bytes} a submission "
                        "folder may hold (MLAB_GRADE_MAX_BYTES)")
    return total, problems


class _Copier:
    """shutil.copytree's copy function for a surveyed submission: each file is opened without following a link,
    checked again by fstat of that descriptor (its kind, the task's cap for the submission files, what the folder
    may still hold), and copied from it, at most the size checked, a sparse file's holes kept as holes."""

    def __init__(self, root: str, shown: str, max_file_bytes: int, capped: frozenset[str], budget: int):
        self.root, self.shown, self.cap, self.capped, self.left = root, shown, max_file_bytes, capped, budget

    def __call__(self, source: str, target: str, follow: bool = False) -> str:
        rel = os.path.relpath(source, self.root)
        shown = os.path.join(self.shown, rel) if rel != "." else self.shown
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
        try:
            fd = os.open(source, flags)
        except OSError as exc:
            raise SubmissionRefused(f"{shown}: changed while it was copied: {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SubmissionRefused(f"{shown}: {_kind(st.st_mode)}")
            size = _size(st)
            if size > self.cap and (follow or os.path.normpath(rel) in self.capped):
                raise SubmissionRefused(_refusal(shown, size, self.cap))
            if size > self.left:
                raise SubmissionRefused(f"{self.shown}: its files hold more than the {FOLDER_MAX_BYTES} bytes a "
                                        "submission folder may hold (MLAB_GRADE_MAX_BYTES)")
            self.left -= size
            _copy_from(fd, st, target)
        finally:
            os.close(fd)
        return target


def _copy_from(fd: int, st: os.stat_result, target: str) -> None:
    """The st.st_size bytes of fd into a new file target, with its mode and times; only the data of a sparse
    file is read and written."""
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        spans = _data_spans(fd, st.st_size) if st.st_blocks * 512 < st.st_size else [(0, st.st_size)]
        for start, end in spans:
            offset = start
            while offset < end:
                os.lseek(out, offset, os.SEEK_SET)
                sent = os.sendfile(out, fd, offset, min(end - offset, 1 << 30))
                if sent == 0:  # shorter than it was: copied as far as it goes
                    break
                offset += sent
        os.ftruncate(out, st.st_size)
        os.fchmod(out, stat.S_IMODE(st.st_mode))
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(out)


def _data_spans(fd: int, size: int) -> list[tuple[int, int]]:
    """(start, end) of each stretch of data in a sparse file below size."""
    spans, offset = [], 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:  # ENXIO: nothing but a hole after offset
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        if start >= end:
            break
        spans.append((start, end))
        offset = end
    return spans


def _watch(folder: str) -> subprocess.Popen | None:
    """A process that removes folder once this one has ended, however it ended (its stdin pipe closes)."""
    try:
        return subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, folder], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                close_fds=True)
    except OSError:
        return None


@contextmanager
def taken_in(path: Path, max_file_bytes: int, capped: frozenset[str] = frozenset({SUBMISSION_FILE})) -> Iterator[Path]:
    """A scratch folder holding a copy of the submission: a folder as it is (links inside it kept as links),
    a file as the only file in one under its own name. SubmissionRefused, before any copy, for bad entries; the
    files of a folder named in `capped` (submission_files) are held to max_file_bytes."""
    path = Path(path)
    size, problems = survey(path, max_file_bytes, capped=capped)
    if problems:
        raise SubmissionRefused("\n".join(problems))
    root = "/dev/shm" if size <= SHM_MAX_BYTES and os.access("/dev/shm", os.W_OK | os.X_OK) else None
    scratch = tempfile.mkdtemp(prefix=f"mlab-grade-{os.getpid()}-", dir=root)  # whose a leftover is
    watchdog = _watch(scratch)
    try:
        target = Path(scratch) / "submission"
        try:
            if path.is_dir():
                root = os.path.realpath(path)
                shutil.copytree(root, target, symlinks=True,
                                copy_function=_Copier(root, str(path), max_file_bytes, capped, FOLDER_MAX_BYTES))
            else:
                target.mkdir()
                _Copier(str(path), str(path), max_file_bytes, capped, FOLDER_MAX_BYTES)(
                    str(path), str(target / path.name), follow=True)  # the path the user named: theirs to give
        except (OSError, shutil.Error) as exc:  # changed since it was checked (a file swapped for a FIFO)
            raise SubmissionRefused(f"{path}: changed while it was copied: {exc}") from None
        yield target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if watchdog is not None:
            watchdog.stdin.close()  # type: ignore[union-attr]
            watchdog.wait()
