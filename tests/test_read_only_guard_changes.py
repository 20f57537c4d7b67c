"""The unconfined sandbox mounts nothing read-only, so its guard learns what a command did to the read-only files
from the kernel's change events (mlab.core.run.read_only_watch): a command costs the guard what it changed, not
what the workspace holds (issue 42 item 4), and what agent code does to them is still undone, through a hard link
or a mapping too. Also: a read-only folder that grows past SEPARATE_MOUNTS_MAX names during a command is not
taken for a new entry and removed."""
from __future__ import annotations

import ctypes
import os

import pytest

from mlab.core.run.read_only_guard import SEPARATE_MOUNTS_MAX
from tests.fixtures.sandboxes import CONFINING
from tests.test_read_only_scale import image_bytes, make_images_env, run

UNCONFINED = ["unconfined", "fallback"]  # the unconfined sandbox, and the local one without namespaces


class Examined:
    """Entries the harness listed (os.scandir) or looked at (os.stat, os.lstat) while it counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        self.on = False
        real_scandir, real_stat, real_lstat = os.scandir, os.stat, os.lstat
        examined = self

        class Listing:
            def __init__(self, *args, **kwargs):
                self.inner = real_scandir(*args, **kwargs)

            def __enter__(self):
                self.inner.__enter__()
                return self

            def __exit__(self, *exc):
                return self.inner.__exit__(*exc)

            def __iter__(self):
                for entry in self.inner:
                    examined.count += examined.on
                    yield entry

        def counted(real):
            def call(*args, **kwargs):
                examined.count += examined.on
                return real(*args, **kwargs)
            return call

        monkeypatch.setattr(os, "scandir", Listing)
        monkeypatch.setattr(os, "stat", counted(real_stat))
        monkeypatch.setattr(os, "lstat", counted(real_lstat))


@pytest.mark.slow  # 3,000 images: over 5 s on two cores
@pytest.mark.parametrize("sandbox", UNCONFINED)
def test_a_command_costs_the_unconfined_guard_what_it_changed(tmp_path, monkeypatch, sandbox):
    """Before, the guard listed and compared all 3,000 read-only images before and after every command; now the
    first command's survey walks them once, and a later command costs the entries its events name."""
    env = make_images_env(tmp_path, sandbox)
    examined = Examined(monkeypatch)
    try:
        obs, err = run(env, "print('first')\n")
        assert not err and "first" in obs, obs
        watching(env)
        examined.on = True
        obs, err = run(env, "open('data/images/00007.png', 'a').write('x')\nprint('wrote')\n")
        examined.on = False
        assert not err and "wrote" in obs, obs
        assert "[read-only files were changed and have been restored: data/images/00007.png]" in obs, obs
        assert (env.workspace / "data" / "images" / "00007.png").read_bytes() == image_bytes(7)
        assert examined.count < 60, examined.count  # before: more than twice the 3,000 images
        examined.count = 0
        examined.on = True
        obs, err = run(env, "print('idle')\n")
        examined.on = False
        assert not err and "idle" in obs and "read-only" not in obs, obs
        assert examined.count < 30, examined.count
    finally:
        env.close()


def files_marked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file past the inotify watch limit, as when the user's processes hold every watch (a refused watch is
    ENOSPC's): each read-only file gets a fanotify mark instead."""
    from mlab.core.run.read_only_watch import FILE_MASK, ReadOnlyWatch

    real_add = ReadOnlyWatch._add

    def folders_only(self, path, mask):
        if mask == FILE_MASK:
            self.limit_reached = True
            return None
        return real_add(self, path, mask)

    monkeypatch.setattr(ReadOnlyWatch, "_add", folders_only)


def marking(env) -> None:
    """Skip where no fanotify mark could be had (Linux before 5.13 refuses a user); else every file is marked."""
    watch = env.scripts.guard._watch
    if watch is None:
        watching(env)  # skips, or fails
        return
    if not watch.marks_used:
        pytest.skip("no fanotify instance can be had by this user here: files past the watch limit are polled")
    assert watch._rel_wd and all(wd < 0 for wd in watch._rel_wd.values()), watch._rel_wd


@pytest.mark.parametrize("by", ["watches", "marks"])
@pytest.mark.parametrize("sandbox", UNCONFINED)
def test_writes_through_a_hard_link_are_undone(tmp_path, monkeypatch, sandbox, by):
    """A file's watch is on its inode: a write through another name reaches it, and so does the link itself
    (the file's link count and change time), which is undone too: a link made outside the workspace is left
    with the old file, and a later write through it changes nothing of the workspace. So with a fanotify mark,
    a file's watch past the inotify limit."""
    if by == "marks":
        files_marked(monkeypatch)
    env = make_images_env(tmp_path, sandbox, count=60)
    outside = tmp_path / "outside"
    outside.mkdir()
    images = env.workspace / "data" / "images"
    try:
        obs, err = run(env, "import os\nos.link('data/images/00001.png', 'mine.png')\n"
                            "open('mine.png', 'r+').write('hacked')\nprint('linked')\n")
        assert not err and "have been restored: data/images/00001.png]" in obs, obs
        if by == "marks":
            marking(env)
        obs, err = run(env, f"import os\nos.link('data/images/00002.png', {str(outside / 'far.png')!r})\n"
                            "print('linked')\n")
        assert not err and "have been restored: data/images/00002.png]" in obs, obs
        obs, err = run(env, f"open({str(outside / 'far.png')!r}, 'r+').write('hacked')\nprint('wrote')\n")
        assert not err and "wrote" in obs and "read-only" not in obs, obs
        assert (outside / "far.png").read_bytes().startswith(b"hacked")
        assert (images / "00001.png").read_bytes() == image_bytes(1)
        assert (images / "00002.png").read_bytes() == image_bytes(2)
        assert os.stat(images / "00002.png").st_nlink == 1
    finally:
        env.close()


@pytest.mark.parametrize("by", ["watches", "marks"])
@pytest.mark.parametrize("sandbox", UNCONFINED)
def test_a_write_through_a_mapping_the_repl_keeps_is_undone(tmp_path, monkeypatch, sandbox, by):
    """A write through a shared mapping has no event. The REPL maps a read-only image in one command and writes
    it through the mapping in the next: the open file is looked at after every command, so the write is found.
    A fanotify mark's opens cannot be counted (its queued events merge): an opened file is one found held, until
    /proc shows no process holds it."""
    if by == "marks":
        files_marked(monkeypatch)
    env = make_images_env(tmp_path, sandbox, count=60)
    images = env.workspace / "data" / "images"
    try:
        obs, err = act_repl(env, "import mmap\nf = open('data/images/00003.png', 'r+b')\n"
                                 "m = mmap.mmap(f.fileno(), 0)\nf.close()\nprint('mapped')")
        assert not err and "mapped" in obs and "read-only" not in obs, obs
        if by == "marks":
            marking(env)
        obs, err = act_repl(env, "m[:6] = b'HACKED'\nm.flush()\nprint('wrote')")
        assert not err and "have been restored: data/images/00003.png]" in obs, obs
        assert (images / "00003.png").read_bytes() == image_bytes(3)
    finally:
        env.close()


def test_a_mapping_made_before_the_guard_watched_is_found_through_proc(tmp_path, monkeypatch):
    """Opens before the watches are unknown: when the first survey had no watch (no inotify instance then), the
    REPL mapped a file without an event. The survey that starts watching reads which files processes hold open
    or mapped (/proc), and looks at those after every command."""
    from mlab.core.run.read_only_watch import ReadOnlyWatch

    env = make_images_env(tmp_path, "unconfined", count=60)
    images = env.workspace / "data" / "images"
    start = ReadOnlyWatch.start
    monkeypatch.setattr(ReadOnlyWatch, "start", classmethod(lambda cls, *args: None))
    try:
        obs, err = act_repl(env, "import mmap\nf = open('data/images/00006.png', 'r+b')\n"
                                 "m = mmap.mmap(f.fileno(), 0)\nf.close()\nprint('mapped')")
        assert not err and "mapped" in obs, obs
        assert env.scripts.guard._watch is None
        monkeypatch.setattr(ReadOnlyWatch, "start", start)
        obs, err = act_repl(env, "m[:6] = b'HACKED'\nm.flush()\nprint('wrote')")
        watching(env)
        assert not err and "have been restored: data/images/00006.png]" in obs, obs
        assert (images / "00006.png").read_bytes() == image_bytes(6)
    finally:
        env.close()


def test_a_pipe_numbered_like_a_recorded_file_is_not_that_file(tmp_path):
    """Which recorded files some process holds is read from /proc by (device, inode): a pipe's or a socket's inode
    number is often a recorded file's too (measured: 4 pipes of 89 processes matched 150,000 images), and taking
    them for that file had every later command scan every process (19 ms a command)."""
    from mlab.core.run.read_only_watch import held_by_processes

    held = tmp_path / "held.bin"
    held.write_bytes(b"x")
    read, write = os.pipe()
    try:
        with open(held, "rb") as f:
            disk = os.fstat(f.fileno())
            pipe = os.fstat(read).st_ino
            assert held_by_processes({pipe}, {disk.st_dev}) == set()
            assert held_by_processes({disk.st_ino}, {disk.st_dev}) == {disk.st_ino}  # a file held is found
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.parametrize("sandbox", UNCONFINED)
def test_a_command_whose_events_overflow_the_queue_is_still_checked(tmp_path, monkeypatch, sandbox):
    """Opening the images over and over fills the kernel's event queue (16,384 events by default) after the
    write: the events are lost, so the record is walked again, and the write is found. Each round opens and
    closes the 300 images (600 events): rounds enough for twice the machine's queue."""
    from mlab.core.run.read_only_watch import ReadOnlyWatch

    with open("/proc/sys/fs/inotify/max_queued_events") as limit:
        rounds = 2 * int(limit.read()) // 600 + 1

    env = make_images_env(tmp_path, sandbox, count=300)
    images = env.workspace / "data" / "images"
    parse, lost = ReadOnlyWatch._parse, []
    monkeypatch.setattr(ReadOnlyWatch, "_parse", lambda self, *args: lost.append(parse(self, *args)) or lost[-1])
    try:
        obs, err = run(env, "print('first')\n")
        assert not err, obs
        obs, err = run(env, "import os\nopen('data/images/00004.png', 'a').write('x')\n"
                            f"for _ in range({rounds}):\n"
                            "    for name in os.listdir('data/images'):\n"
                            "        open(os.path.join('data/images', name), 'rb').close()\nprint('read')\n")
        assert not err and "have been restored: data/images/00004.png]" in obs, obs
        assert (images / "00004.png").read_bytes() == image_bytes(4)
        assert True in lost  # the queue did overflow
        obs, err = run(env, "open('data/images/00005.png', 'w').write('x')\nprint('again')\n")
        assert not err and "have been restored: data/images/00005.png]" in obs, obs
        assert len(os.listdir(images)) == 300
    finally:
        env.close()


@pytest.mark.parametrize("sandbox", [*UNCONFINED, *CONFINING])
def test_a_read_only_folder_growing_past_the_mount_limit_stays(tmp_path, sandbox):
    """data/images/* with exactly SEPARATE_MOUNTS_MAX images is not mounted as one folder: agent code may add an
    image. Before, the look after the command judged the folder anew, now holding more names, as read-only
    itself, found it missing from the survey and removed it as a new entry, every image with it."""
    env = make_images_env(tmp_path, sandbox, count=SEPARATE_MOUNTS_MAX)
    images = env.workspace / "data" / "images"
    try:
        obs, err = run(env, "open('data/images/new.png', 'w').write('x')\nprint('added')\n")
        assert "added" in obs, obs
        assert "have been removed: data/images/new.png]" in obs, obs
        assert sorted(os.listdir(images)) == [f"{n:05d}.png" for n in range(SEPARATE_MOUNTS_MAX)]
        assert all((images / f"{n:05d}.png").read_bytes() == image_bytes(n) for n in range(SEPARATE_MOUNTS_MAX))
        if sandbox in UNCONFINED:  # also when the events overflow the queue and the record is walked again
            obs, err = run(env, "import os\nopen('data/images/new.png', 'w').write('x')\n"
                                "for _ in range(300):\n    for name in os.listdir('data/images'):\n"
                                "        open(os.path.join('data/images', name), 'rb').close()\nprint('added')\n")
            assert "added" in obs and "have been removed: data/images/new.png]" in obs, obs
            assert len(os.listdir(images)) == SEPARATE_MOUNTS_MAX
    finally:
        env.close()


def watching(env) -> None:
    """Skip when the guard has no watch because no inotify instance can be had now (fs.inotify.max_user_instances,
    128 on many machines, shared by all the user's processes: parallel test workers may hold them all), or some
    files went unwatched because the user's processes hold fs.inotify.max_user_watches already."""
    watch = env.scripts.guard._watch
    if watch is not None:
        if watch._unwatched_files or watch._unwatched_folders:
            pytest.skip("the user's processes hold every inotify watch here now: some files are polled instead")
        return
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        pytest.skip("no inotify instance can be had here now: the guard compares every entry instead")
    os.close(fd)
    pytest.fail("the unconfined guard has no watch although inotify instances can be had")


def act_repl(env, command: str) -> tuple[str, bool]:
    from mlab.core.models import Action

    return env.execute(Action(name="Python REPL", args={"command": command}))


@pytest.mark.parametrize("marks", [False, True], ids=["polled", "marked"])
@pytest.mark.parametrize("freed", [False, True], ids=["limited", "freed"])
@pytest.mark.parametrize("watches", [0, 1, 2, 40])
def test_past_the_watch_limit_what_is_unwatched_is_polled(tmp_path, monkeypatch, watches, freed, marks):
    """fs.inotify.max_user_watches is shared by all the user's processes: past it, a file gets a fanotify mark;
    where none can be had, an unwatched file gets a stat after every command, and an unwatched folder is listed.
    With no watch at all, with the root's only, with the folders' only, and with some files watched, a changed, a
    replaced, an added and a removed image are found; also once watches came free and every 64th look watched
    what it could."""
    from mlab.core.fs.inode_marks import InodeMarks
    from mlab.core.run.read_only_watch import ReadOnlyWatch

    if not marks:
        monkeypatch.setattr(InodeMarks, "open", classmethod(lambda cls: None))

    real_add = ReadOnlyWatch._add
    given: list[int] = []
    limit = [watches]

    def limited(self, path, mask):
        if len(given) >= limit[0]:
            return None  # as ENOSPC
        wd = real_add(self, path, mask)
        if wd is not None:
            given.append(wd)
        return wd

    monkeypatch.setattr(ReadOnlyWatch, "_add", limited)
    env = make_images_env(tmp_path, "unconfined", count=60)
    images = env.workspace / "data" / "images"
    try:
        obs, err = run(env, "print('first')\n")
        assert not err and "read-only" not in obs, obs
        if marks:
            watch = env.scripts.guard._watch
            if not watch.marks_used:
                pytest.skip("no fanotify instance can be had by this user here")
            assert not watch._unwatched_files, watch._unwatched_files  # marks took every file past the limit
        if freed:
            limit[0] = 10 ** 6
        env.scripts.guard._watch._polls = 63  # the next look is a 64th: every unwatched one in full, watched again
        obs, err = run(env, "print('again')\n")
        assert not err and "read-only" not in obs, obs
        watch = env.scripts.guard._watch
        if freed:
            assert not watch._unwatched_files and not watch._unwatched_folders
        obs, err = run(env, "import os\nopen('data/images/00010.png', 'a').write('x')\n"
                            "open('x.png', 'w').write('fake')\nos.replace('x.png', 'data/images/00020.png')\n"
                            "os.remove('data/images/00030.png')\nopen('data/images/new.png', 'w').write('x')\n"
                            "open('data/train.csv', 'a').write('x')\nprint('done')\n")
        assert not err and "done" in obs, obs
        assert ("have been restored: data/images/00010.png, data/images/00020.png, data/images/00030.png, "
                "data/train.csv]") in obs, obs
        assert "have been removed: data/images/new.png]" in obs, obs
        assert sorted(os.listdir(images)) == [f"{n:05d}.png" for n in range(60)]
        assert all((images / f"{n:05d}.png").read_bytes() == image_bytes(n) for n in (10, 20, 30))
        obs, err = run(env, "print('idle')\n")
        assert not err and "read-only" not in obs, obs
    finally:
        env.close()


def test_a_watch_lost_during_a_command_compares_every_entry_that_once(tmp_path, monkeypatch):
    """When no inotify instance can be had any more at the look after a command (the record must be walked again
    and cannot be), the record as surveyed is compared with a walk of every entry: the change is still found,
    and later commands walk before and after as without inotify."""
    from mlab.core.run.read_only_watch import ReadOnlyWatch

    env = make_images_env(tmp_path, "unconfined", count=60)
    images = env.workspace / "data" / "images"
    real_refresh = ReadOnlyWatch.refresh

    def failing(self, poll=True):
        if poll:
            raise OSError("no inotify instance")
        return real_refresh(self, poll)

    try:
        obs, err = run(env, "print('first')\n")
        assert not err, obs
        watching(env)
        monkeypatch.setattr(ReadOnlyWatch, "refresh", failing)
        monkeypatch.setattr(ReadOnlyWatch, "start", classmethod(lambda cls, *args: None))
        obs, err = run(env, "import os\nopen('data/images/00011.png', 'a').write('x')\n"
                            "open('data/images/new.png', 'w').write('x')\nos.remove('data/images/00012.png')\n")
        assert "have been restored: data/images/00011.png, data/images/00012.png]" in obs, obs
        assert "have been removed: data/images/new.png]" in obs, obs
        assert env.scripts.guard._watch is None
        obs, err = run(env, "open('data/images/00013.png', 'a').write('x')\n")
        assert "have been restored: data/images/00013.png]" in obs, obs
        assert sorted(os.listdir(images)) == [f"{n:05d}.png" for n in range(60)]
        assert all((images / f"{n:05d}.png").read_bytes() == image_bytes(n) for n in (11, 12, 13))
    finally:
        env.close()


def test_the_look_after_a_command_ends_while_a_process_keeps_opening_read_only_files(tmp_path, monkeypatch):
    """A process that lives on (the REPL's thread) reading a read-only file in a loop makes open and close events
    as fast as the guard reads them: the look reads what was queued when it began, and the rest is the next
    look's, so the step ends (it read for ever before: the harness hung)."""
    from mlab.core.fs import change_watch

    env = make_images_env(tmp_path, "unconfined", count=20)
    try:
        out, failed = run(env, "print('ok')")
        assert not failed, out
        watching(env)
        watch = env.scripts.guard._watch
        image = env.workspace / "data" / "images" / "00003.png"
        real_read, reads = os.read, []

        def read_then_open(fd, size):
            data = real_read(fd, size)
            reads.append(len(data))
            if len(reads) > 1000:
                pytest.fail("the look kept reading events made after it began")
            image.read_bytes()  # an open and a close of a watched read-only file: two more events
            return data

        image.read_bytes()
        monkeypatch.setattr(change_watch.os, "read", read_then_open)
        watch.refresh()
        monkeypatch.setattr(change_watch.os, "read", real_read)
        assert image.read_bytes() == image_bytes(3)
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("limit,marks", [(100, 50), (100, None), (None, None)], ids=["limited", "marked", "machine"])
def test_a_run_past_the_watch_limit_says_so_once(tmp_path, limit, marks):
    """Past the user's inotify watch limit a read-only file gets a fanotify mark, which counts against a limit of
    its own; past both, each unwatched read-only file costs a stat per command (2.1x a bare child at 200,000
    files under this machine's 192,530 watches, before marks). The run says that once, on stderr and in its error
    log and trace, with how many files are past the limits and the settings to raise. The limits are lowered in
    a user namespace of the run's own (user.max_inotify_watches, user.max_fanotify_marks), so the machine's stay
    as they are; where marks took every file past the watch limit, and under the machine's own limits, a run
    says nothing of it."""
    import re
    import sys
    from pathlib import Path

    from tests.fixtures.read_only_task import make_read_only_task
    from tests.fixtures.watch_limit import run_under_watch_limit

    task = make_read_only_task(tmp_path / "ro-task", 300, str(Path(sys.executable).with_name("mlab")))
    said, logged, kept = run_under_watch_limit(tmp_path, task, limit=limit, sandbox="unconfined", scripts=3,
                                               marks=marks)
    if marks is None:
        if limit is not None and said and "fanotify" not in said[0]:
            pytest.skip(f"no fanotify mark can be had by a user here (Linux before 5.13?): {said[0]}")
        assert not said and not logged and not kept, said
        return
    assert len(said) == 1 and len(logged) == 1 and len(kept) == 1, said  # three commands ran
    # the workspace's 300 images, train.csv and test.csv (valid.csv is held out); the limit's 100 watches go to
    # the folders and the first files, the 50 marks to the next
    counted = re.search(r"([\d,]+) of 302 read-only files", said[0])
    assert counted and 150 <= int(counted[1].replace(",", "")) < 252, said
    assert "fs.inotify.max_user_watches and fs.fanotify.max_user_marks" in said[0], said


FEW_FILES_OPEN = """
import os, resource, sys
from pathlib import Path
from mlab.core.run.read_only_guard import ReadOnlyGuard
from mlab.core.run.read_only_watch import ReadOnlyWatch
from mlab.core.run.readonly import read_only_rule

root = Path(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
watch = ReadOnlyWatch.start(root, read_only_rule(("train/*",)), ReadOnlyGuard._whole_size)
print("unwatched", watch.unwatched()[0])
journal = watch.journal()
for record in sorted(os.listdir(root / "train")):
    with open(root / "train" / record / "a.png", "ab") as out:
        out.write(b"x")
watch.refresh()
_before, now = watch.changes(journal)
print("changed", sum(rel.endswith("/a.png") for rel in now))
"""


def test_a_tree_of_more_folders_than_files_may_be_open_is_watched_whole(tmp_path):
    """A user's limit on open files is often 1,024 (mlab leaves it as it is) while a task's read-only files may
    lie in 20,000 folders (contrails' train/). The record held every folder's descriptor at once while it watched
    their files, so past the limit files went unwatched (a stat each after every command); and a command whose
    events named files in more folders than that had changes missed. With the limit at 64: 150 folders."""
    import subprocess
    import sys

    for record in range(150):
        folder = tmp_path / "ws" / "train" / f"r{record:03d}"
        folder.mkdir(parents=True)
        (folder / "a.png").write_bytes(b"a")
        (folder / "b.png").write_bytes(b"b")
    done = subprocess.run([sys.executable, "-c", FEW_FILES_OPEN, str(tmp_path / "ws")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["unwatched", "0", "changed", "150"], done.stdout
