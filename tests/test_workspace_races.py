"""The harness never follows a path agent code can change, and bounded walks survive hostile trees.

A separate process swaps a workspace folder with a symlink to a folder outside the workspace with
renameat2(RENAME_EXCHANGE), as fast as it can, while the harness snapshots, restores, writes files and puts
back read-only files hundreds of times. Nothing outside may be read, changed or created.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlab.core.bench.evaluate import evaluate_runs
from mlab.core.errors import EnvError
from mlab.core.fs.dirfd import MAX_DEPTH, open_root, remove_at
from mlab.core.run.edit_history import EditHistory
from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.read_only_guard import ReadOnlyGuard
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.workspace import Workspace
from mlab.core.sandbox.local import LocalSandbox

SECRET = b"SECRET-OUTSIDE-0600-e41d"
OPERATIONS = 220  # per kind of harness operation

SWAPPER = textwrap.dedent("""
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    os.chdir(sys.argv[1])
    target = sys.argv[2]
    print("ready", flush=True)
    while True:
        # d <-> l: at any instant d is either the real folder or a symlink to the folder outside
        if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"l", RENAME_EXCHANGE) != 0:
            # the harness replaced one of them: plant them again
            if not os.path.lexists("l"):
                os.symlink(target, "l")
            if not os.path.lexists("d"):
                try:
                    os.mkdir("d")
                except FileExistsError:
                    pass
""")


def renameat2_available() -> bool:
    return hasattr(ctypes.CDLL(None), "renameat2")


def tree_state(root: Path) -> dict[str, str]:
    """Every entry below root: kind and content hash (links by target), never following links."""
    state = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                state[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                state[rel] = "dir"
            else:
                state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return state


def settings(ws: Path, tmp_path: Path, **more) -> EnvSettings:
    return EnvSettings(**{"workspace": ws, "read_only_patterns": [], "sandbox": LocalSandbox(),
                          "store": SnapshotStore(tmp_path / "settings-store"), **more})


@pytest.fixture
def swapped(tmp_path):
    """A workspace whose folder d is swapped with a symlink l -> outside/victim, and the outside tree."""
    if not renameat2_available():
        pytest.skip("this C library has no renameat2")
    outside = tmp_path / "outside"
    victim = outside / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "keep.txt").write_text("do not delete\n")
    (victim / "ro.txt").write_text("outside copy of the read-only file\n")
    (victim / "sub" / "a.txt").write_text("outside a\n")
    secret = victim / "secret.txt"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    ws = tmp_path / "workspace"
    (ws / "d" / "sub").mkdir(parents=True)
    (ws / "d" / "a.txt").write_text("inside a\n")
    (ws / "d" / "ro.txt").write_text("pristine read-only\n")
    (ws / "d" / "sub" / "a.txt").write_text("inside sub a\n")
    os.symlink(victim, ws / "l")
    before = tree_state(outside)
    proc = subprocess.Popen([sys.executable, "-c", SWAPPER, str(ws), str(victim)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    try:
        yield ws, outside
    finally:
        proc.kill()
        proc.wait()
    assert tree_state(outside) == before, "the harness changed something outside the workspace"


@pytest.mark.slow
def test_snapshots_taken_during_the_swap_never_hold_what_lies_outside(swapped, tmp_path):
    ws, _outside = swapped
    store = SnapshotStore(tmp_path / "store")
    for i in range(OPERATIONS):
        manifest = store.take(ws, f"s{i}")
        assert not any(rel.endswith(("secret.txt", "keep.txt")) for rel in manifest), manifest
    secret_digest = hashlib.sha256(SECRET).hexdigest()
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_bytes(), path
            assert secret_digest not in path.name
    assert not list((tmp_path / "store" / "snapshots").glob("*secret*"))


def test_restores_during_the_swap_change_nothing_outside(swapped, tmp_path):
    ws, _outside = swapped
    store = SnapshotStore(tmp_path / "store")
    # a snapshot holding d/ as a real folder, taken before the race starts mattering
    (tmp_path / "clean").mkdir()
    (tmp_path / "clean" / "d" / "sub").mkdir(parents=True)
    (tmp_path / "clean" / "d" / "a.txt").write_text("restored a\n")
    (tmp_path / "clean" / "d" / "sub" / "b.txt").write_text("restored b\n")
    store.take(tmp_path / "clean", "clean")
    done = 0
    for _ in range(OPERATIONS):
        try:
            store.restore("clean", ws)
            done += 1
        except OSError:
            pass  # the swap won a race: the restore stops, it never follows the link
    assert done > OPERATIONS // 4


def test_write_file_during_the_swap_creates_nothing_outside(swapped, tmp_path):
    ws, _outside = swapped
    workspace = Workspace(settings(ws, tmp_path))
    written = refused = 0
    for i in range(OPERATIONS):
        try:
            path = workspace.writable(f"d/new{i}/deeper/x.txt")
            workspace.write_atomic(path, b"agent text\n", f"d/new{i}/deeper/x.txt")
            written += 1
        except EnvError:
            refused += 1
    assert written + refused == OPERATIONS


def test_appends_during_the_swap_change_nothing_outside(swapped, tmp_path):
    """Append File writes in place: the file is opened from its folder's descriptor, so a folder swapped for a
    link never leads the write (or the kept old version) to the file outside of the same name."""
    ws, _outside = swapped
    store = SnapshotStore(tmp_path / "append-store")
    workspace = Workspace(settings(ws, tmp_path, store=store))
    history = EditHistory(workspace, store)
    appended = refused = 0
    for i in range(OPERATIONS):
        try:
            history.append(workspace.writable("d/a.txt"), f"line {i}\n".encode(), "d/a.txt")
            appended += 1
        except EnvError:
            refused += 1
    assert appended + refused == OPERATIONS
    kept = [store.read_object(digest) for digest in history.backups.get("d/a.txt", [])]
    assert all(b"outside" not in version and SECRET not in version for version in kept)


def test_read_only_restores_during_the_swap_change_nothing_outside(swapped, tmp_path):
    ws, _outside = swapped
    pristine = tmp_path / "pristine"
    (pristine / "d").mkdir(parents=True)
    (pristine / "d" / "ro.txt").write_text("pristine read-only\n")
    rules = settings(ws, tmp_path, read_only_patterns=["d/ro.txt"], pristine_dir=pristine)
    guard = ReadOnlyGuard(rules, Workspace(rules))
    for _ in range(OPERATIONS):
        guard._restore_one("d/ro.txt", pristine)
        guard.state()
        guard.paths()


class OpenWatch:
    """Counts every open of a file or folder directly inside the watched folders (inotify's IN_OPEN)."""

    IN_OPEN, IN_NONBLOCK = 0x20, 0o4000

    def __init__(self, *folders: Path):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        if self.fd < 0:
            pytest.skip("inotify is not available here")
        for folder in folders:
            assert self.libc.inotify_add_watch(self.fd, os.fsencode(folder), self.IN_OPEN) >= 0

    def opened(self) -> list[str]:
        names = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            at = 0
            while at < len(data):
                _wd, _mask, _cookie, length = struct.unpack_from("iIII", data, at)
                names.append(data[at + 16:at + 16 + length].rstrip(b"\0").decode() or ".")
                at += 16 + length
        os.close(self.fd)
        return names


def test_reads_and_listings_during_the_swap_never_open_anything_outside(swapped, tmp_path):
    """Read File, Inspect Script Lines, Copy File's read and List Files: agent code swapping a folder on the
    path for a link makes them fail, and they never even open what lies outside (a device there would act)."""
    ws, outside = swapped
    watch = OpenWatch(outside / "victim", outside / "victim" / "sub")
    workspace = Workspace(settings(ws, tmp_path))
    done = refused = 0
    attempts = OPERATIONS * 10  # each open races the swapper only for microseconds
    for _ in range(attempts):
        for operation in (lambda: workspace.read_text("d/a.txt"), lambda: os.close(workspace.open_folder("d/sub"))):
            try:
                operation()
                done += 1
            except EnvError:
                refused += 1
    assert watch.opened() == [], "the harness opened files outside the workspace"
    assert done and done + refused == 2 * attempts


# ---- hostile trees ------------------------------------------------------------------------------

def make_deep_tree(root: Path, levels: int) -> None:
    """A chain of `levels` folders with a file at the bottom, made one level at a time (the full path is far
    longer than PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        out = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"at the bottom\n")
        os.close(out)
    finally:
        os.close(fd)


@pytest.fixture
def deep_cleanup(tmp_path):
    """pytest's own clean-up of tmp_path recurses: remove any deep chain left behind (by a failing test) first."""
    yield
    for folder, dirs, _files in os.walk(tmp_path):
        if "d" in dirs:
            root = open_root(folder)
            try:
                remove_at(root, "d")
            finally:
                os.close(root)
            dirs.remove("d")


@pytest.mark.usefixtures("deep_cleanup")
@pytest.mark.parametrize("levels", [1_100, pytest.param(10_000, marks=pytest.mark.slow)])
def test_deep_trees_are_snapshotted_restored_and_removed_within_bounds(tmp_path, levels):
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "train.py").write_text("print(1)\n")
    store = SnapshotStore(tmp_path / "store")
    store.take(ws, "before")
    make_deep_tree(ws, levels)
    manifest = store.take(ws, "deep")  # no RecursionError, no walk past the bound
    assert f"more than {MAX_DEPTH} levels deep" in store.left_out
    assert all(rel.count("/") < MAX_DEPTH for rel in manifest)
    store.restore("before", ws)  # the whole chain is removed, however deep
    assert sorted(os.listdir(ws)) == ["train.py"]
    target = tmp_path / "scratch"
    target.mkdir()
    store.materialize("deep", target)
    assert (target / "train.py").read_text() == "print(1)\n"


@pytest.mark.slow
@pytest.mark.usefixtures("deep_cleanup")
def test_remove_at_deletes_a_10000_level_tree_with_two_descriptors(tmp_path):
    make_deep_tree(tmp_path, 10_000)
    fds_before = len(os.listdir("/proc/self/fd"))
    root = open_root(tmp_path)
    try:
        remove_at(root, "d")
    finally:
        os.close(root)
    assert os.listdir(tmp_path) == [] and len(os.listdir("/proc/self/fd")) == fds_before


@pytest.mark.slow
@pytest.mark.usefixtures("deep_cleanup")
def test_a_run_whose_script_builds_a_10000_level_tree_finishes_and_is_scored(tmp_path):
    from test_hostile import registry, run_case, script

    run = run_case(tmp_path, "local", script(
        "import os\n"
        "os.makedirs('keep', exist_ok=True)\n"
        "open('submission.csv', 'w').write('a\\nb\\n')\n"
        "for _ in range(10000):\n"
        "    os.mkdir('d'); os.chdir('d')\n"
        "open('bottom.txt', 'w').write('x')\n"
        "print('built')\n"), timeout=60, step_bound_s=120)
    observation, _error = run.step(2)
    assert "built" in observation and f"more than {MAX_DEPTH} levels deep" in observation
    assert run.trace["final_score"] == 2.0
    # `mlab eval`'s path scores the stored final snapshot again
    [evaluated] = evaluate_runs([run.run_dir], registry=registry(), workers=1)
    assert evaluated["final"] == (2.0, None)


def test_workspace_paths_resolve_as_realpath_does_with_the_root_resolved_once(tmp_path):
    """Agent-given names resolve to what os.path.realpath gives (links, '..', missing parts, odd slashes),
    lstatting only the name's own parts; one leading out is refused; a workspace folder later swapped for a
    link is not written through."""
    root = tmp_path / "ws"
    (root / "d" / "e").mkdir(parents=True)
    (root / "d" / "f.txt").write_text("x")
    (tmp_path / "outside").mkdir()
    os.symlink("d/e", root / "link_in")
    os.symlink("../outside", root / "link_out")
    os.symlink("loop", root / "loop")
    space = Workspace(settings(root, tmp_path))
    inside_names = ["d", "d/f.txt", "d/", "./d//f.txt", "d/e/../f.txt", "link_in", "link_in/../f.txt", "new.txt",
                    "d/missing/deeper.txt", "missing/../d", "d/./e/", "loop", "link_in/x/../y"]
    for name in inside_names:
        assert str(space.path(name)) == os.path.realpath(root / name), name
    for name in ["..", "d/../..", "link_out", "link_out/x.txt", "missing/../../outside"]:
        with pytest.raises(EnvError, match="outside the workspace"):
            space.path(name)
    assert space.rel(space.path("d/f.txt")) == "d/f.txt" and space.rel(space.path("d/..")) == "."
    with pytest.raises(EnvError, match="read-only|folder itself"):
        space.writable(".")
    # the workspace folder swapped for a link to elsewhere: nothing is written through it
    os.rename(root, tmp_path / "ws-moved")
    os.symlink(tmp_path / "outside", root)
    with pytest.raises(EnvError):
        space.write_atomic(space.path("anything.txt"), b"x", "anything.txt")
    assert not os.listdir(tmp_path / "outside")
