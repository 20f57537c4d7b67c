"""Taking in a loose submission (`mlab grade`): the file or folder is untrusted, so its kinds and sizes are
checked before a byte is copied, and the scratch copy never outlives the command.

A folder may hold regular files, folders and links that stay inside it; a FIFO, socket or device, a link out of
it, a file given alone over the task's cap (its apparent size or the blocks it holds, so a sparse file cannot be
written out dense) and a folder whose files add up past the folder cap are each named on a line of their own, and
nothing is copied. A file in a folder is not held to the task's cap, since a workspace may hold more than the file
the task reads (a saved model); its holes stay holes when copied, so a 2 GB sparse submission.csv costs no 2 GB of
writes before the task's evaluate refuses it by its size. The scratch folder is removed when the block ends, and a
watchdog process removes it if this process is killed outright (kill -9) before it could.
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


def survey(path: Path, max_file_bytes: int, max_total_bytes: int = FOLDER_MAX_BYTES) -> tuple[int, list[str]]:
    """(bytes a copy would write, one line per bad entry) for a submission file or folder, read without
    following links and without opening any file."""
    path = Path(path)
    problems: list[str] = []
    try:
        st = os.stat(path)  # the path the user named may itself be a link: theirs to give
    except OSError as exc:
        return 0, [f"{path}: cannot be read: {exc.strerror or exc}"]
    if stat.S_ISREG(st.st_mode):
        if _size(st) > max_file_bytes:
            problems.append(f"{path}: {_size(st)} bytes, more than the task's {max_file_bytes}")
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
                if _size(st) > max_total_bytes:
                    oversized = True
                    problems.append(f"{shown}: {_size(st)} bytes, more than the {max_total_bytes} a submission "
                                    "folder may hold")
            else:
                problems.append(f"{shown}: {_kind(st.st_mode)}")
    if total > max_total_bytes and not oversized:
        problems.append(f"{path}: its files hold {total} bytes, more than the {max_total_bytes} a submission "
                        "folder may hold (MLAB_GRADE_MAX_BYTES)")
    return total, problems


def _copy_keeping_holes(source: str, target: str) -> str:
    """shutil.copy2, except that a sparse file's holes stay holes (only its data is read and written)."""
    st = os.stat(source, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode) or st.st_blocks * 512 >= st.st_size:
        return str(shutil.copy2(source, target))
    with open(source, "rb") as src, open(target, "wb") as dst:
        offset = 0
        while offset < st.st_size:
            try:
                start = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: nothing but a hole after offset
                break
            end = os.lseek(src.fileno(), start, os.SEEK_HOLE)
            src.seek(start)
            dst.seek(start)
            while start < end and (chunk := src.read(min(end - start, 1 << 20))):
                dst.write(chunk)
                start += len(chunk)
            offset = end
        dst.truncate(st.st_size)
    shutil.copystat(source, target)
    return target


def _watch(folder: str) -> subprocess.Popen | None:
    """A process that removes folder once this one has ended, however it ended (its stdin pipe closes)."""
    try:
        return subprocess.Popen([sys.executable, "-S", "-c", _WATCHDOG, folder], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                close_fds=True)
    except OSError:
        return None


@contextmanager
def taken_in(path: Path, max_file_bytes: int) -> Iterator[Path]:
    """A scratch folder holding a copy of the submission: a folder as it is (links inside it kept as links),
    a file as the only file in one under its own name. SubmissionRefused, before any copy, for bad entries."""
    path = Path(path)
    size, problems = survey(path, max_file_bytes)
    if problems:
        raise SubmissionRefused("\n".join(problems))
    root = "/dev/shm" if size <= SHM_MAX_BYTES and os.access("/dev/shm", os.W_OK | os.X_OK) else None
    scratch = tempfile.mkdtemp(prefix="mlab-grade-", dir=root)
    watchdog = _watch(scratch)
    try:
        target = Path(scratch) / "submission"
        try:
            if path.is_dir():
                shutil.copytree(path, target, symlinks=True, copy_function=_copy_keeping_holes)
            else:
                target.mkdir()
                _copy_keeping_holes(str(path), str(target / path.name))
        except (OSError, shutil.Error) as exc:  # changed since it was checked (a file swapped for a FIFO)
            raise SubmissionRefused(f"{path}: changed while it was copied: {exc}") from None
        yield target
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if watchdog is not None:
            watchdog.stdin.close()  # type: ignore[union-attr]
            watchdog.wait()
