"""A step costs what changed: after a confined script the snapshot looks only where the kernel's change events
(inotify) point, and records exactly what a walk of the whole workspace would have recorded, whatever the
script did (new, changed, removed, renamed files and folders, hard links, memory-mapped writes, more events
than the kernel queues)."""
from __future__ import annotations

import os
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from mlab.core.models import Action
from mlab.core.run.environment import Environment, EnvSettings
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.sandbox.limits import Limits
from tests.test_sandbox import make_sandbox

FOLDERS, FILES = 30, 20


def make_env(tmp_path: Path, sandbox: str = "local") -> Environment:
    ws = tmp_path / "ws"
    for folder in range(FOLDERS):
        (ws / "src" / f"p{folder:03d}").mkdir(parents=True)
        for number in range(FILES):
            (ws / "src" / f"p{folder:03d}" / f"f{number:03d}.py").write_text(f"# {folder} {number}\n")
    (ws / "data").mkdir()
    (ws / "data" / "train.csv").write_text("id,y\n1,2\n")
    (ws / "step.py").write_text("")  # each step's script, rewritten in place
    return Environment(EnvSettings(
        workspace=ws, read_only_patterns=["data/*"], sandbox=make_sandbox(sandbox),
        store=SnapshotStore(tmp_path / "store"), sandbox_home=tmp_path / "home",
        limits=Limits(timeout_s=60), python=sys.executable, extra_env={"MLAB_TEST_MARK": uuid.uuid4().hex}))


def step(env: Environment, code: str, name: str) -> dict:
    """Agent code, then the snapshot a run takes after it."""
    (env.workspace / "step.py").write_text(code)
    obs, err = env.execute(Action(name="Execute Script", args={"script_name": "step.py"}))
    assert not err, obs
    return env.s.store.take(env.workspace, name, changes=env.s.store.changes)


def walked(env: Environment, tmp_path: Path) -> dict:
    """What a store that never saw the workspace records of it (a walk of everything)."""
    return SnapshotStore(tmp_path / f"fresh-{uuid.uuid4().hex}").take(env.workspace, "all")


@contextmanager
def recorded_env(tmp_path: Path, sandbox: str = "local"):
    """make_env's environment with its first snapshot taken."""
    env = make_env(tmp_path, sandbox)
    try:
        env.s.store.take(env.workspace, "s0", changes=env.s.store.changes)
        yield env
    finally:
        env.close()


STEPS = [
    ("change one file", "open('src/p007/f003.py', 'a').write('more\\n')\n"),
    ("new nested folders", "import os\nos.makedirs('out/a/b/c')\nopen('out/a/b/c/x.txt', 'w').write('x')\n"
                           "open('out/a/y.txt', 'w').write('y')\n"),
    ("remove a file and a folder", "import os, shutil\nos.unlink('src/p001/f000.py')\nshutil.rmtree('src/p002')\n"),
    ("rename a folder inside the tree", "import os\nos.rename('src/p003', 'out/moved')\n"
                                        "open('out/moved/f001.py', 'w').write('after the move\\n')\n"),
    ("a folder replaced by another", "import os, shutil\nshutil.rmtree('src/p004')\nos.mkdir('src/p004')\n"
                                     "open('src/p004/f000.py', 'w').write('new\\n')\n"),
    ("chmod and a symlink", "import os\nos.chmod('src/p005/f000.py', 0o600)\nos.symlink('f001.py', 'src/p005/ln')\n"),
    ("a shared memory mapping", "import mmap\nf = open('src/p006/f000.py', 'r+b')\n"
                                "m = mmap.mmap(f.fileno(), 0)\nf.close()\nm[0:1] = b'X'\nm.flush()\n"),
    ("same size and same second", "import os\nst = os.stat('src/p008/f000.py')\n"
                                  "open('src/p008/f000.py', 'r+').write('#')\n"
                                  "os.utime('src/p008/f000.py', ns=(st.st_atime_ns, st.st_mtime_ns))\n"),
]


def test_every_kind_of_change_is_recorded_as_a_walk_records_it(tmp_path, entered):
    with recorded_env(tmp_path) as env:
        for number, (what, code) in enumerate(STEPS, 1):
            entered.clear()
            manifest = step(env, code, f"s{number}")
            assert len(entered) < FOLDERS, (what, entered)  # not a walk of every folder
            assert manifest == walked(env, tmp_path), what


def test_a_step_lists_only_the_folders_on_the_changed_path(tmp_path, entered):
    with recorded_env(tmp_path) as env:
        entered.clear()
        step(env, "open('src/p007/f003.py', 'a').write('x')\n", "s1")  # a file changed: read again, nothing listed
        assert entered == []
        step(env, "open('src/p007/new.py', 'w').write('x')\n", "s2")  # a new name: its folder and those above
        assert entered == ["", "src/", "src/p007/"]


def test_a_write_through_another_hard_link_is_recorded(tmp_path):
    """Only the link written through has an event: finding a file with other links makes the store walk all."""
    with recorded_env(tmp_path) as env:
        step(env, "import os\nos.link('src/p009/f000.py', 'src/p010/alias.py')\n", "s1")
        manifest = step(env, "open('src/p010/alias.py', 'a').write('through the alias\\n')\n", "s2")
        assert manifest["src/p009/f000.py"] == manifest["src/p010/alias.py"]
        assert manifest == walked(env, tmp_path)


@pytest.mark.slow
def test_more_events_than_the_kernel_queues_fall_back_to_a_walk(tmp_path, entered, monkeypatch):
    from mlab.core.fs.change_watch import ChangeWatch

    drained = []
    real_drain = ChangeWatch.drain
    monkeypatch.setattr(ChangeWatch, "drain", lambda self: drained.append(real_drain(self)) or drained[-1])
    with recorded_env(tmp_path) as env:
        # 20,000 new files in a watched folder: two events each, past the kernel's queue of 16,384
        manifest = step(env, "for n in range(20000):\n    open(f'src/p015/new{n}', 'w').close()\n", "s1")
        assert drained[-1] is None  # the events were lost, and the store knew it
        assert manifest == walked(env, tmp_path) and len([p for p in manifest if "/new" in p]) == 20000
        entered.clear()
        manifest = step(env, "open('src/p011/f000.py', 'a').write('x')\n", "s2")  # events again after the walk
        listed = len(entered)
        assert drained[-1] is not None and listed < FOLDERS and manifest == walked(env, tmp_path)


def test_after_the_repl_or_unconfined_code_the_store_walks_everything(tmp_path, entered):
    """A REPL lives on between actions (a mapping it holds can write without an event), and unconfined code can
    reach the workspace's files from anywhere: neither step trusts the events."""
    with recorded_env(tmp_path / "repl") as env:
        store = env.s.store
        obs, err = env.execute(Action(name="Python REPL", args={"command": (
            "import mmap\nf = open('src/p012/f000.py', 'r+b')\nm = mmap.mmap(f.fileno(), 0)\nf.close()")}))
        assert not err, obs
        store.take(env.workspace, "s1", changes=store.changes)
        entered.clear()
        obs, err = env.execute(Action(name="Python REPL", args={"command": "m[0:1] = b'Y'; m.flush()"}))
        assert not err, obs
        manifest = store.take(env.workspace, "s2", changes=store.changes)
        assert len(entered) > FOLDERS and manifest == walked(env, tmp_path)
    with recorded_env(tmp_path / "fallback", sandbox="fallback") as env:
        entered.clear()
        step(env, "open('src/p013/f000.py', 'a').write('x')\n", "s1")
        assert len(entered) > FOLDERS


def test_without_inotify_every_step_walks(tmp_path, entered, monkeypatch):
    from mlab.core.fs.change_watch import ChangeWatch

    monkeypatch.setattr(ChangeWatch, "open", classmethod(lambda cls: None))
    with recorded_env(tmp_path) as env:
        entered.clear()
        manifest = step(env, "open('src/p014/f000.py', 'a').write('x')\n", "s1")
        assert len(entered) > FOLDERS and manifest == walked(env, tmp_path)


def test_the_watch_follows_folders_made_after_it_began(tmp_path):
    """A folder made by one step is watched from then on: a later change inside it is an event."""
    with recorded_env(tmp_path) as env:
        step(env, "import os\nos.makedirs('late/inner')\nopen('late/inner/a.txt', 'w').write('1')\n", "s1")
        manifest = step(env, "open('late/inner/a.txt', 'w').write('22')\n", "s2")
        assert manifest["late/inner/a.txt"]["size"] == 2 and manifest == walked(env, tmp_path)
        assert os.path.exists(env.workspace / "late" / "inner" / "a.txt")


def test_a_drain_ends_while_events_keep_coming(tmp_path, monkeypatch):
    """Agent code renaming in a loop makes events as fast as the harness reads them (CI: a snapshot beside
    test_workspace_races' swapper read for 600 s): a drain reads what was queued when it began, and leaves what
    came after to the next one."""
    from mlab.core.fs import change_watch
    from mlab.core.fs.dirfd import open_root, opened

    (tmp_path / "w").mkdir()
    watch = change_watch.ChangeWatch.open()
    if watch is None:
        pytest.skip("no inotify here")
    with opened(open_root(tmp_path / "w")) as folder:
        watch.add(folder, "")
    (tmp_path / "w" / "a").write_text("x")
    real_read, reads = os.read, []

    def read_then_rename(fd, size):  # each read brings one more event, as a renaming loop beside it would
        data = real_read(fd, size)
        reads.append(len(data))
        if len(reads) > 1000:
            pytest.fail("drain kept reading events made after it began")
        old, new = ("a", "b") if (tmp_path / "w" / "a").exists() else ("b", "a")
        os.rename(tmp_path / "w" / old, tmp_path / "w" / new)
        return data

    monkeypatch.setattr(change_watch.os, "read", read_then_rename)
    events = watch.drain()
    assert events is not None and events[""].relist  # what was queued is read
    monkeypatch.setattr(change_watch.os, "read", real_read)
    assert watch.drain()[""].relist  # and the renames made meanwhile are the next drain's
    watch.close()
