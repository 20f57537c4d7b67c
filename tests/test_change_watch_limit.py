"""A tree with more folders than the kernel lets a user watch (fs.inotify.max_user_watches: 8,192 on many
machines, shared by every process of the user) still costs a step what changed: the folders watched report
their events, the few past the limit are listed again at every step, and nothing is missed. Before, one watch
that could not be added made every step a walk of the whole tree.

The case runs in a child process in a user namespace of its own, whose watch limit (user.max_inotify_watches)
it lowers without touching the machine's."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT, FOLDERS = 100, 150  # the store watches the root, train/ and src/ too

CHILD = f"""
import json, sys
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
Path('/proc/sys/user/max_inotify_watches').write_text('{LIMIT}')
from mlab.core.fs import tree_index
from mlab.core.run.snapshot import SnapshotStore

ws, stores = Path(sys.argv[1]), Path(sys.argv[2])
for n in range({FOLDERS}):
    (ws / 'train' / f'r{{n:03d}}').mkdir(parents=True)
    (ws / 'train' / f'r{{n:03d}}' / 'a.npy').write_bytes(b'%d' % n)
(ws / 'src').mkdir()
(ws / 'src' / 'a.py').write_text('a')
entered = []
real_scan = tree_index.Scanner.scan
def scan(self, fd, prefix, folder, depth):
    entered.append(prefix)
    return real_scan(self, fd, prefix, folder, depth)
tree_index.Scanner.scan = scan
store = SnapshotStore(stores / 'run')
store.record(ws, 's0', changes=store.changes)
notes = [store.watch_limit_note()]
steps = []
for number in range(1, 4):
    for n in range(0, {FOLDERS}, 7):  # folders watched and folders past the limit alike
        (ws / 'train' / f'r{{n:03d}}' / 'a.npy').write_bytes(b'step %d' % number)
    (ws / 'src' / 'a.py').write_text('step %d' % number)
    entered.clear()
    manifest = store.take(ws, f's{{number}}', changes=store.changes)
    listed = len(entered)
    walked = SnapshotStore(stores / f'w{{number}}').take(ws, 'all')
    steps.append({{'entered': listed, 'same': manifest == walked}})
    notes.append(store.watch_limit_note())
print(json.dumps({{'steps': steps, 'notes': notes}}))
"""


def test_a_tree_past_the_watch_limit_is_not_walked_whole_at_every_step(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    done = subprocess.run(["unshare", "-U", "-r", sys.executable, "-c", CHILD, str(tmp_path / "ws"),
                           str(tmp_path / "stores")], capture_output=True, text=True, timeout=120)
    if done.returncode != 0 and not done.stdout and ("unshare" in done.stderr or "max_inotify" in done.stderr):
        pytest.skip(f"no user namespace with a watch limit of its own here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    steps = found["steps"]
    for step in steps:
        assert step["same"], steps  # recorded as a walk of everything records it
        # the folders past the limit (about FOLDERS - LIMIT), not all of them
        assert step["entered"] <= FOLDERS - LIMIT + 10, steps
    # said once, when the first record went past the limit: how many folders, and the setting to raise
    first, *later = found["notes"]
    assert first is not None and not any(later), found["notes"]
    counted = re.search(r"([\d,]+) of ([\d,]+) folders", first)
    assert counted and int(counted[2]) == FOLDERS + 3 and FOLDERS - LIMIT <= int(counted[1]) <= FOLDERS, first
    assert "fs.inotify.max_user_watches" in first, first


@pytest.mark.slow
def test_a_run_whose_folders_go_past_the_watch_limit_says_so_once(tmp_path):
    """The snapshot store's watches past the limit cost each step a listing of those folders: the run says so
    once (stderr, errors.log, the trace), as the unconfined guard says it of read-only files."""
    from tests.fixtures.watch_limit import run_under_watch_limit

    task = tmp_path / "task"
    subprocess.run([str(Path(sys.executable).with_name("mlab")), "new-task", str(task)], check=True,
                   capture_output=True)
    with open(task / "starter" / "train.py", "a") as f:  # the workspace grows past the limit in step 1
        f.write(f"\nimport os\nfor n in range({FOLDERS}):\n    os.makedirs(f'made/r{{n:03d}}', exist_ok=True)\n")
    said, logged, kept = run_under_watch_limit(tmp_path, task, limit=LIMIT, sandbox="local", scripts=2)
    assert len(said) == 1 and len(logged) == 1 and len(kept) == 1, said
    assert re.search(r"[\d,]+ of [\d,]+ folders of the workspace", said[0]), said
