"""A snapshot records what the workspace holds, whoever wrote it and however: code in the harness process that
writes with plain open() (a plugin's action, an observer, an agent) announces nothing, and the next snapshot must
still hold its files rather than reuse the previous one."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlab.core.run.snapshot import SnapshotStore


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("print(1)\n")
    (root / "notes.txt").write_text("first\n")
    return root


def walked(ws: Path, tmp_path: Path, name: str) -> dict:
    """What a store that never saw the workspace records of it."""
    return SnapshotStore(tmp_path / f"fresh-{name}").take(ws, "all")


def recorded(ws: Path, tmp_path: Path) -> SnapshotStore:
    store = SnapshotStore(tmp_path / "store")
    store.take(ws, "s0", changes=store.changes)
    return store


def test_a_file_written_with_plain_open_between_snapshots_is_recorded(ws, tmp_path):
    store = recorded(ws, tmp_path)
    with open(ws / "plugin_output.txt", "w") as f:  # what an action from a plugin might do
        f.write("written without telling the store\n")
    manifest = store.take(ws, "s1", changes=store.changes)
    assert "plugin_output.txt" in manifest
    assert manifest == walked(ws, tmp_path, "s1")


@pytest.mark.parametrize("change", ["append in place", "new folder", "remove", "same size and time"])
def test_every_unannounced_change_is_recorded(ws, tmp_path, change):
    store = recorded(ws, tmp_path)
    if change == "append in place":
        with open(ws / "notes.txt", "a") as f:
            f.write("second\n")
    elif change == "new folder":
        (ws / "out" / "deep").mkdir(parents=True)
        (ws / "out" / "deep" / "model.bin").write_bytes(b"\0" * 100)
    elif change == "remove":
        os.unlink(ws / "src" / "train.py")
    else:  # the stat a walk compares is put back: only the kernel's event tells
        st = os.stat(ws / "notes.txt")
        with open(ws / "notes.txt", "r+") as f:
            f.write("FIRST")
        os.utime(ws / "notes.txt", ns=(st.st_atime_ns, st.st_mtime_ns))
    manifest = store.take(ws, "s1", changes=store.changes)
    assert manifest == walked(ws, tmp_path, "s1"), change


def test_a_write_by_a_workspace_action_beside_a_plain_one_keeps_both(ws, tmp_path):
    store = recorded(ws, tmp_path)
    (ws / "src" / "train.py").write_text("print(2)\n")  # what Write File does, through its own code
    (ws / "src" / "extra.py").write_text("print('a plugin wrote me')\n")
    manifest = store.take(ws, "s1", changes=store.changes)
    assert manifest == walked(ws, tmp_path, "s1")


def test_agent_code_changing_a_folder_the_harness_made_is_recorded(ws, tmp_path):
    """A folder the harness made is watched like any other: a confined script that later changes a file in it
    is seen by the events that stand in for a walk."""
    store = recorded(ws, tmp_path)
    (ws / "out").mkdir()
    (ws / "out" / "x.txt").write_text("one\n")
    store.take(ws, "s1", changes=store.changes)
    store.changes.ran_agent_code()
    with open(ws / "out" / "x.txt", "a") as f:
        f.write("two, by agent code\n")
    store.changes.code_ended({}, confined=True)
    manifest = store.take(ws, "s2", changes=store.changes)
    assert manifest == walked(ws, tmp_path, "s2")


def test_nothing_written_still_reuses_the_previous_snapshot(ws, tmp_path):
    store = recorded(ws, tmp_path)
    (ws / "notes.txt").read_text()  # reading is no change
    store.take(ws, "s1", changes=store.changes)
    snapshots = tmp_path / "store" / "snapshots"
    assert os.stat(snapshots / "s1.json").st_ino == os.stat(snapshots / "s0.json").st_ino
