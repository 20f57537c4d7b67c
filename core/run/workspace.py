"""Safe access to a hostile workspace: agent code may swap any path for a symlink at any instant.

Every read and write goes through a file descriptor opened without following a last-moment symlink and
checked to still lie inside the workspace.
"""
from __future__ import annotations

import os
import secrets
import stat
from contextlib import suppress
from pathlib import Path

from mlab.core.errors import EnvError
from mlab.core.fs.dirfd import NotAFolder, open_dirs, open_root, opened
from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.readonly import inside, is_read_only, relative_name, resolve_in_workspace

MAX_READ_BYTES = 2_000_000
MAX_WRITE_BYTES = 20_000_000


class Workspace:
    def __init__(self, settings: EnvSettings):
        self.settings = settings  # read live: the read-only patterns may be replaced after construction
        self.root = settings.workspace.resolve()
        self._real_root = str(self.root)  # resolved once: paths are checked against it, never re-resolved

    def path(self, given: str) -> Path:
        return resolve_in_workspace(self._real_root, given)

    def rel(self, path: Path) -> str:
        real = str(path)
        if not inside(self._real_root, real):
            raise ValueError(f"{real!r} is not in the workspace {self._real_root!r}")
        return relative_name(self._real_root, real)

    def writable(self, given: str) -> Path:
        path = self.path(given)
        rel = relative_name(self._real_root, str(path))
        if rel == ".":
            raise EnvError(f"{given!r} is the workspace folder itself, not a file")
        patterns = self.settings.read_only_patterns
        as_given = os.path.normpath(given).replace(os.sep, "/")
        if is_read_only(rel, patterns) or is_read_only(as_given, patterns):
            raise EnvError(f"{given!r} is read-only: the task does not allow changing it")
        if path.is_dir():
            raise EnvError(f"{given!r} is a folder")
        return path

    def _verified(self, fd: int, given: str) -> int:
        """fd, unless the file opened is not in the workspace after all (a path swapped while we looked): then fd
        is closed and the path refused."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return fd  # no /proc: the resolved-path check already ran
        if not inside(self._real_root, real):
            os.close(fd)
            raise EnvError(f"path {given!r} points outside the workspace")
        return fd

    def _open_at(self, path: Path, given: str, flags: int) -> int:
        """Open the resolved workspace path one component at a time from the workspace root, following no
        link: a folder swapped for a link since `path` was resolved makes this fail, never reach (or open a
        device) outside."""
        parts = list(path.relative_to(self.root).parts)
        try:
            root = open_root(self.root)
        except OSError as exc:
            raise EnvError(f"the workspace folder cannot be opened: {exc.strerror}") from exc
        try:
            if not parts:
                return os.dup(root)
            try:
                dir_fd = open_dirs(root, parts[:-1])
            except NotAFolder:
                raise EnvError(f"{given!r} changed while it was opened (a folder on its path was replaced)") from None
        finally:
            os.close(root)
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise EnvError(f"{given!r} cannot be opened: {exc.strerror}") from exc
        finally:
            os.close(dir_fd)
        return self._verified(fd, given)

    def open_regular(self, given: str) -> tuple[int, os.stat_result]:
        """An fd of the regular workspace file `given`, opened without following a last-moment symlink."""
        path = self.path(given)
        if not os.path.lexists(path):
            raise EnvError(f"file {given!r} does not exist")
        if path.is_dir():
            raise EnvError(f"{given!r} is a folder, not a file; use List Files to see what it holds")
        fd = self._open_at(path, given, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not wait for a writer
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise EnvError(f"{given!r} is not a regular file")
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def open_folder(self, given: str) -> int:
        """An fd of the workspace folder `given`, opened without following a last-moment symlink."""
        path = self.path(given)
        if not os.path.lexists(path):
            raise EnvError(f"folder {given!r} does not exist")
        try:
            os.stat(path)
        except OSError as exc:
            raise EnvError(f"{given!r} cannot be opened: {exc.strerror}") from exc
        if not path.is_dir():
            raise EnvError(f"{given!r} is a file, not a folder")
        return self._open_at(path, given, os.O_RDONLY | os.O_DIRECTORY)

    def read_bytes(self, given: str, limit: int, advice: str = "") -> bytes:
        fd, st = self.open_regular(given)
        with os.fdopen(fd, "rb") as f:
            if st.st_size > limit:
                raise EnvError(f"{given!r} is {st.st_size} bytes, more than the {limit} this action handles"
                               + (f"; {advice}" if advice else ""))
            data = f.read(limit + 1)
        if len(data) > limit:  # it grew since fstat
            raise EnvError(f"{given!r} is more than the {limit} bytes this action handles")
        return data

    def read_text(self, given: str, limit: int = MAX_READ_BYTES,
                  advice: str = "use Inspect Script Lines to read it in parts") -> str:
        data = self.read_bytes(given, limit, advice)
        if b"\x00" in data[:8192]:
            raise EnvError(f"{given!r} is a binary file, not text")
        return data.decode("utf-8", errors="replace")

    def write_atomic(self, path: Path, data: bytes, given: str) -> None:
        """Replace path with data: other links to the old file are left alone and a reader never sees half."""
        if len(data) > MAX_WRITE_BYTES:
            raise EnvError(f"content of {len(data)} bytes is more than the {MAX_WRITE_BYTES} allowed")
        with opened(self.open_parent(path, given)) as dir_fd:
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
                with suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise

    def open_parent(self, path: Path, given: str) -> int:
        """A descriptor of path's folder, made if missing, opened one component at a time from the workspace
        root without following a symlink: a folder swapped for a link to elsewhere fails, nothing is made
        outside the workspace."""
        parts = list(path.relative_to(self.root).parts[:-1])
        try:
            root = open_root(self.root)
        except OSError as exc:
            raise EnvError(f"the workspace folder cannot be opened: {exc.strerror}") from exc
        try:
            dir_fd = open_dirs(root, parts, create=True)
        except NotAFolder as exc:
            raise EnvError(f"cannot create {given!r}: a part of its folder path ({exc.filename!r}) is a file or a "
                           "link") from None
        finally:
            os.close(root)
        return self._verified(dir_fd, given)

    def recreate_if_removed(self) -> None:
        """A confined script cannot remove the workspace folder (a mount point), an unconfined one can."""
        if not os.path.isdir(self.root) or os.path.islink(self.root):
            if os.path.lexists(self.root):
                os.unlink(self.root)
            self.root.mkdir(parents=True)
