"""The snapshot store: a tree of per-folder listings, reading only what changed, durable without fsync per file.

Reads are counted by watching which workspace files the store opens (strace-free: the store's own open is
wrapped), so "hashes only what differs" is asserted on the calls, not on timings.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from mlab.core.fs.dirfd import MAX_DEPTH
from mlab.core.fs.durable import fs_now_ns
from mlab.core.run.snapshot import SnapshotStore


def make_tree(ws: Path, folders: int = 5, files: int = 20) -> None:
    for d in range(folders):
        (ws / f"d{d}" / "inner").mkdir(parents=True)
        for f in range(files):
            (ws / f"d{d}" / f"f{f}.txt").write_text(f"folder {d} file {f}\n")
        (ws / f"d{d}" / "inner" / "x.bin").write_bytes(bytes([d]) * 3000)
    (ws / "top.py").write_text("print('top')\n")


def state(ws: Path) -> dict[str, str]:
    found = {}
    for path in sorted(ws.rglob("*")):
        rel = path.relative_to(ws).as_posix()
        if path.is_symlink():
            found[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def manifest_state(manifest: dict) -> dict[str, str]:
    return {rel: ("link:" + e["link"]) if "link" in e else e["sha256"] for rel, e in manifest.items()}


class OpenCounter:
    """Names of the workspace files the store reads (opens by name relative to a folder descriptor)."""

    def __init__(self, monkeypatch):
        self.names: list[str] = []
        real_open = os.open

        def counting_open(path, flags, mode=0o777, *, dir_fd=None):
            if dir_fd is not None and not flags & os.O_DIRECTORY:
                self.names.append(os.fsdecode(path))
            return real_open(path, flags, mode, dir_fd=dir_fd)

        monkeypatch.setattr(os, "open", counting_open)


def wait_for_new_tick(path: Path) -> None:
    """Until the file system's clock has moved past the change time of `path` (its timestamps are coarse)."""
    marker = path.parent / ".tick"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        marker.write_bytes(b"")
        if marker.stat().st_ctime_ns > path.stat().st_ctime_ns:
            marker.unlink()
            return
    raise AssertionError("the file system clock did not move")


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    make_tree(root)
    wait_for_new_tick(root / "top.py")  # files changed in the tick of a snapshot are read again by the next
    return root


def test_snapshots_are_trees_of_folder_listings_and_unchanged_folders_are_shared(ws, tmp_path):
    store = SnapshotStore(tmp_path / "run")
    first = store.take(ws, "s0")
    assert manifest_state(first) == state(ws)
    raw = (tmp_path / "run" / "snapshots" / "s0.json").read_bytes()
    root = json.loads(raw)
    assert root["top.py"]["sha256"] and set(root["d0"]) == {"tree"}
    assert raw == json.dumps(root, sort_keys=True, separators=(",", ":")).encode()  # one encoding per content
    objects_before = SnapshotStore(tmp_path / "run").objects.digests()
    (ws / "d3" / "inner" / "x.bin").write_bytes(b"changed")
    second = store.take(ws, "s1")
    assert manifest_state(second) == state(ws) and store.manifest("s1") == second
    reopened = SnapshotStore(tmp_path / "run")
    new_objects = reopened.objects.digests() - objects_before
    # the new file, and the listings of d3/inner and d3: nothing for the four other folders
    assert len(new_objects) == 3
    after = json.loads((tmp_path / "run" / "snapshots" / "s1.json").read_text())
    assert after["d0"] == root["d0"] and after["d3"] != root["d3"]
    for digest in reopened.objects.digests():
        assert hashlib.sha256(reopened.read_object(digest)).hexdigest() == digest


def tear(store_root: Path, digest: str, data: bytes) -> None:
    """Overwrite a stored object's bytes in place, as a crash before the sync can leave them."""
    found = SnapshotStore(store_root).objects.location(digest)
    assert found is not None
    path, offset, size = found
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data[:size].ljust(size, b"\0"))


def test_small_objects_go_into_one_pack_not_a_file_each(ws, tmp_path):
    store = SnapshotStore(tmp_path / "run")
    manifest = store.take(ws, "s0")
    objects = tmp_path / "run" / "objects"
    assert sorted(p.suffix for p in objects.rglob("*") if p.is_file()) == [".idx", ".pack"]
    assert {e["sha256"] for e in manifest.values()} <= SnapshotStore(tmp_path / "run").objects.digests()
    # a later process adds its own pack; the first is never written again
    first = {p.name: p.stat().st_size for p in objects.rglob("*") if p.is_file()}
    (ws / "d1" / "f1.txt").write_text("changed\n")
    later = SnapshotStore(tmp_path / "run")
    later.take(ws, "s1")
    now = {p.name: p.stat().st_size for p in objects.rglob("*") if p.is_file()}
    assert len(now) == 4 and all(now[name] == size for name, size in first.items())
    assert manifest_state(SnapshotStore(tmp_path / "run").manifest("s1")) == state(ws)


def test_a_file_bigger_than_the_pack_limit_is_stored_as_its_own_object(ws, tmp_path):
    big = os.urandom(3 << 20)
    (ws / "big.bin").write_bytes(big)
    store = SnapshotStore(tmp_path / "run")
    digest = store.take(ws, "s0")["big.bin"]["sha256"]
    path = tmp_path / "run" / "objects" / digest[:2] / digest
    assert path.read_bytes() == big
    restored = tmp_path / "restored"
    restored.mkdir()
    SnapshotStore(tmp_path / "run").materialize("s0", restored)
    assert (restored / "big.bin").read_bytes() == big and state(restored) == state(ws)


def test_a_folder_holding_nothing_recorded_is_left_out_as_before(ws, tmp_path):
    (ws / "empty" / "deeper").mkdir(parents=True)
    os.mkfifo(ws / "d1" / "pipe")
    store = SnapshotStore(tmp_path / "run")
    manifest = store.take(ws, "s0")
    assert not any(rel.startswith("empty") for rel in manifest) and "d1/pipe" not in manifest
    assert "empty" not in json.loads((tmp_path / "run" / "snapshots" / "s0.json").read_text())


def test_flat_manifests_written_by_earlier_versions_still_load_restore_and_materialize(ws, tmp_path):
    store = SnapshotStore(tmp_path / "run")
    flat = store.take(ws, "tree")
    (tmp_path / "run" / "snapshots" / "old.json").write_text(json.dumps(flat, sort_keys=True))
    assert store.manifest("old") == flat and store.verify("old") == []
    (ws / "d0" / "f1.txt").write_text("edited\n")
    (ws / "stray.txt").write_text("stray\n")
    store.restore("old", ws)
    assert state(ws) == manifest_state(flat)
    out = tmp_path / "out"
    out.mkdir()
    store.materialize("old", out)
    assert state(out) == manifest_state(flat)


def test_only_files_whose_stat_changed_are_read_again(ws, tmp_path, monkeypatch):
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0")
    target = ws / "d2" / "f5.txt"
    target.write_text("new content\n")
    wait_for_new_tick(target)
    counter = OpenCounter(monkeypatch)
    store.take(ws, "s1")
    assert counter.names == ["f5.txt"]
    counter.names.clear()
    manifest = store.take(ws, "s2")
    assert counter.names == [] and manifest_state(manifest) == state(ws)


def test_a_file_read_in_the_clock_tick_it_changed_in_is_read_again_next_time(ws, tmp_path, monkeypatch):
    """Racy files: a change later in the same tick keeps size, mtime (utime) and ctime (coarse), so a stat
    taken in that tick cannot vouch for the content."""
    import mlab.core.run.snapshot as snapshot

    store = SnapshotStore(tmp_path / "run")
    target = ws / "top.py"
    store.take(ws, "s0")
    target.write_text("print('x')\n")  # same size as before
    # The snapshot is taken within the tick of that change: the file system's "now" is its ctime.
    monkeypatch.setattr(snapshot, "trust_horizon_ns", lambda *_a: target.stat().st_ctime_ns)
    store.take(ws, "s1")
    counter = OpenCounter(monkeypatch)
    store.take(ws, "s2")
    assert counter.names == ["top.py"]  # read again, although its stat did not change
    monkeypatch.undo()
    # The file system's clock must first pass the change: a coarse tick can lag the file's fine-grained ctime.
    deadline = time.monotonic() + 10
    while fs_now_ns(tmp_path / "clock")[1] <= target.stat().st_ctime_ns and time.monotonic() < deadline:
        time.sleep(0.001)
    store.take(ws, "s3")  # read at a later tick...
    counter = OpenCounter(monkeypatch)
    store.take(ws, "s4")
    assert counter.names == []  # ...its stat now vouches for it
    assert manifest_state(store.manifest("s4")) == state(ws)


def test_no_change_reuses_the_previous_snapshot_without_reading_the_workspace(ws, tmp_path, monkeypatch):
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", changes=store.changes)
    counter = OpenCounter(monkeypatch)
    scanned = []
    monkeypatch.setattr(os, "scandir", lambda *a: scanned.append(a) or pytest.fail("listed a folder"))
    store.take(ws, "s1", changes=store.changes)
    assert counter.names == [] and scanned == []
    snapshots = tmp_path / "run" / "snapshots"
    assert os.stat(snapshots / "s1.json").st_ino == os.stat(snapshots / "s0.json").st_ino
    assert store.manifest("s1") == store.manifest("s0")


def test_the_paths_written_are_updated_alone_and_agent_code_means_a_full_walk(ws, tmp_path, monkeypatch, entered):
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", changes=store.changes)
    (ws / "d1" / "new" / "deep").mkdir(parents=True)
    (ws / "d1" / "new" / "deep" / "n.txt").write_text("written by Write File\n")
    (ws / "d4" / "f0.txt").write_text("overwritten\n")
    counter = OpenCounter(monkeypatch)
    scanned = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda *a: scanned.append(a) or real_scandir(*a))
    entered.clear()
    manifest = store.take(ws, "s1", changes=store.changes)
    # the change events name d4/f0.txt (read again) and a new name in d1: d1 and the folders on the way are listed
    assert sorted(counter.names) == ["f0.txt", "n.txt"]
    assert entered == ["", "d1/", "d1/new/", "d1/new/deep/"]
    assert manifest_state(manifest) == state(ws)
    # Agent code may have changed anything: everything is listed again.
    (ws / "d0" / "f3.txt").unlink()
    store.changes.ran_agent_code()
    manifest = store.take(ws, "s2", changes=store.changes)
    assert scanned and manifest_state(manifest) == state(ws)


def test_a_written_path_whose_folder_became_a_link_falls_back_to_a_walk(ws, tmp_path):
    import shutil

    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", changes=store.changes)
    shutil.rmtree(ws / "d1")
    os.symlink("d2", ws / "d1")
    manifest = store.take(ws, "s1", changes=store.changes)
    assert manifest["d1"]["link"] == "d2" and not any(rel.startswith("d1/") for rel in manifest)
    assert manifest_state(manifest) == {rel: digest for rel, digest in state(ws).items()
                                        if not rel.startswith("d1/")}


def test_skip_is_asked_once_per_name_not_per_prefix_or_per_snapshot(ws, tmp_path):
    asked: list[str] = []

    def skip(rel: str) -> bool:
        asked.append(rel)
        return rel == "d1"

    store = SnapshotStore(tmp_path / "run")
    manifest = store.take(ws, "s0", skip=skip)
    assert not any(rel.startswith("d1/") for rel in manifest)
    assert len(asked) == len(set(asked)) and not any(rel.startswith("d1/") for rel in asked)
    asked.clear()
    (ws / "d2" / "added.txt").write_text("added\n")
    store.take(ws, "s1", skip=skip)
    assert asked == ["d2/added.txt"]


def test_the_walk_limits_still_bound_a_deep_tree(tmp_path):
    ws = tmp_path / "ws"
    path = ws
    for _ in range(MAX_DEPTH + 5):
        path = path / "d"
    path.mkdir(parents=True)
    (path / "bottom.txt").write_text("bottom\n")
    (ws / "top.txt").write_text("top\n")
    store = SnapshotStore(tmp_path / "run")
    manifest = store.take(ws, "s0")
    assert f"more than {MAX_DEPTH} levels deep" in store.left_out and "top.txt" in manifest
    assert all(rel.count("/") < MAX_DEPTH for rel in manifest)


def test_nothing_is_fsynced_file_by_file_one_syncfs_makes_the_snapshot_durable(ws, tmp_path, monkeypatch):
    import mlab.core.run.snapshot as snapshot

    calls: list[str] = []
    listing = tmp_path / "run" / "snapshots" / "s0.json"
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(f"fsync {os.readlink(f'/proc/self/fd/{fd}')}"))
    monkeypatch.setattr(snapshot, "sync_filesystem", lambda path: calls.append(f"syncfs {listing.exists()}"))
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", changes=store.changes)
    assert calls == ["syncfs True"]  # once, with the listing in place
    calls.clear()
    store.take(ws, "s1", changes=store.changes)  # the same snapshot again: a link, and its folder synced
    assert calls == [f"fsync {tmp_path / 'run' / 'snapshots'}"]


def listing_bytes(store_root: Path, name: str) -> bytes:
    return (store_root / "snapshots" / f"{name}.json").read_bytes()


def change_kinds(ws: Path, step: int) -> str | None:
    """One change per step, of every kind a folder's listing must follow; returns the path a Write File
    action would report, or None when agent code did it."""
    import shutil

    changes = [
        lambda: (ws / "d0" / "f1.txt").write_text("changed\n") or "d0/f1.txt",
        lambda: (ws / "d0" / "a new name.txt").write_text("new\n") or "d0/a new name.txt",
        lambda: (ws / "d1" / "f2.txt").unlink(),
        lambda: shutil.rmtree(ws / "d2" / "inner"),  # a subfolder goes
        lambda: (ws / "d2" / "inner").write_text("a file where a folder was\n"),
        lambda: ((ws / "d3" / "f4.txt").unlink(), (ws / "d3" / "f4.txt").mkdir(),
                 (ws / "d3" / "f4.txt" / "x").write_text("a folder where a file was\n")),
        lambda: os.symlink("f5.txt", ws / "d3" / "f5.link"),
        lambda: ((ws / "d3" / "f5.link").unlink(), (ws / "d3" / "f5.link").write_text("link became a file\n")),
        lambda: ((ws / "d4" / "f6.txt").unlink(), os.symlink("../top.py", ws / "d4" / "f6.txt")),
        lambda: (ws / "d4" / "empty").mkdir(),  # holds nothing: not in the listing
        lambda: (ws / "d4" / "empty" / "now.txt").write_text("not empty any more\n") or "d4/empty/now.txt",
        lambda: os.mkfifo(ws / "d1" / "pipe"),
        lambda: (ws / "d1" / "f\u00e9\"q\\.txt").write_text("a name json escapes\n") or "d1/f\u00e9\"q\\.txt",
        lambda: shutil.rmtree(ws / "d1"),
    ]
    result = changes[step % len(changes)]()
    return result if isinstance(result, str) else None


@pytest.fixture
def split_walks(monkeypatch):
    """The walk after agent code splits even this small tree with a forked child; the SplitWalks made."""
    from mlab.core.fs import split_walk

    made = []
    real_start = split_walk.start

    def start(*args, **kwargs):
        made.append(real_start(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(split_walk, "MIN_ENTRIES", 1)
    monkeypatch.setattr(split_walk, "_cores", lambda: 2)
    monkeypatch.setattr(split_walk, "start", start)
    return made


@pytest.mark.parametrize("how", ["walk", "change-events", "walk-split"])
def test_listings_kept_up_to_date_step_by_step_are_the_bytes_a_fresh_store_writes(ws, tmp_path, how, request):
    """Each folder re-encodes only its changed names: after every kind of change the listings must be byte
    for byte those of a store that records the workspace from scratch (also when a forked child listed half
    the folders)."""
    told = how == "change-events"
    splits = request.getfixturevalue("split_walks") if how == "walk-split" else None
    kept = SnapshotStore(tmp_path / "kept")
    kept.take(ws, "s0", changes=kept.changes)
    for step in range(1, 15):
        path = change_kinds(ws, step - 1)
        if not (told and path is not None):
            kept.changes.ran_agent_code()
        manifest = kept.take(ws, f"s{step}", changes=kept.changes)
        fresh = SnapshotStore(tmp_path / f"fresh{step}")
        fresh.take(ws, "s")
        assert listing_bytes(tmp_path / "kept", f"s{step}") == listing_bytes(tmp_path / f"fresh{step}", "s"), step
        assert manifest_state(manifest) == {rel: digest for rel, digest in state(ws).items()
                                            if not rel.endswith("pipe")}
        assert kept.verify(f"s{step}") == []
    if splits is not None:  # every walk of the kept store split (a fresh store has nothing recorded to split)
        used = [split.used for split in splits if split is not None]
        assert len(used) == 14 and sum(used) >= 14 * 3, used


def test_a_split_walk_answers_only_for_the_folder_the_child_listed(ws, tmp_path, split_walks):
    """The child's answer for a path is refused when the folder the caller opened there is another one."""
    from mlab.core.fs import split_walk
    from mlab.core.fs.dirfd import open_dir_at, open_root

    store = SnapshotStore(tmp_path / "store")
    store.take(ws, "s0")
    (ws / "d4" / "f0.txt").write_text("changed by agent code\n")
    (ws / "d4" / "f1.txt").unlink()
    root = open_root(ws)
    try:
        walk = split_walk.start(root, store._index[2], 10**6)
        other, d4 = open_dir_at(root, "d3"), open_dir_at(root, "d4")
        try:
            assert walk.take("d4/", other) is None  # d3 opened where the child listed d4
            walk = split_walk.start(root, store._index[2], 10**6)
            entries, listed, gone = walk.take("d4/", d4)
            assert {e.name for e in entries} == {"f0.txt", "inner"} and gone == ["f1.txt"] and listed == 20
            assert entries[0].is_dir() == (entries[0].name == "inner")
            assert walk.take("d0/", d4) is None  # not one the child took
        finally:
            for fd in (other, d4):
                os.close(fd)
            walk.close()
    finally:
        os.close(root)


def test_folder_listings_are_compact_sorted_json():
    from mlab.core.fs.tree_index import fragment

    entries = [("a.py", {"sha256": "ab" * 32, "size": 10, "mode": 0o644}),
               ('od"d\\\u00e9', {"size": 0, "mode": 0o600, "sha256": "cd" * 32}),
               ("l", {"link": "../x \"y\"", "sha256": "ef" * 32, "size": 7, "mode": 0o777}),
               ("odd", {"sha256": "not hex\"", "size": 1, "mode": 0o644}),
               ("odder", {"sha256": "\u00e9" * 64, "size": 1, "mode": 0o644}),
               ("big", {"sha256": "01" * 32, "size": 2**40, "mode": 0o755})]
    for name, entry in entries:
        assert fragment(name, entry) == f"{json.dumps(name)}:{json.dumps(entry, sort_keys=True, separators=(',', ':'))}"


def test_a_first_snapshot_lstats_no_file_it_reads(ws, tmp_path, monkeypatch):
    """The listing's file type says which names are folders, a new file's stat comes from the descriptor it is
    read through: one lstat per file would be pure cost on the first snapshot."""
    lstats: list[str] = []
    real_stat = os.stat

    def counting_stat(path, *args, dir_fd=None, follow_symlinks=True):
        if dir_fd is not None:
            lstats.append(os.fsdecode(path))
        return real_stat(path, *args, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    os.symlink("top.py", ws / "link.py")
    monkeypatch.setattr(os, "stat", counting_stat)
    manifest = SnapshotStore(tmp_path / "run").take(ws, "s0")
    assert lstats == ["link.py"]  # a link's own stat is its key: nothing opens a link
    assert manifest_state(manifest) == state(ws)


def test_a_torn_object_is_found_by_verify_and_never_reused_by_its_name(ws, tmp_path):
    store = SnapshotStore(tmp_path / "run")
    manifest = store.take(ws, "s0")
    digest = manifest["d2/f7.txt"]["sha256"]
    torn_at = store.objects.location(digest)
    tear(tmp_path / "run", digest, b"")  # as a crash before the sync can leave it
    reopened = SnapshotStore(tmp_path / "run")  # a resumed run: a new process
    assert reopened.verify("s0") == ["d2/f7.txt"]
    # The same content met again is stored again, not trusted because the index names it.
    (ws / "copy.txt").write_text("folder 2 file 7\n")
    reopened.take(ws, "s1")
    assert reopened.objects.location(digest) != torn_at
    assert reopened.verify("s1") == [] and SnapshotStore(tmp_path / "run").verify("s0") == []
    assert SnapshotStore(tmp_path / "run").read_object(digest) == b"folder 2 file 7\n"  # the later copy wins


def test_a_torn_loose_object_is_removed_and_stored_again(ws, tmp_path):
    (ws / "big.bin").write_bytes(os.urandom(2 << 20))
    digest = SnapshotStore(tmp_path / "run").take(ws, "s0")["big.bin"]["sha256"]
    torn = tmp_path / "run" / "objects" / digest[:2] / digest
    torn.chmod(0o644)
    torn.write_bytes(b"")
    reopened = SnapshotStore(tmp_path / "run")
    assert reopened.verify("s0") == ["big.bin"] and not torn.exists()
    (ws / "big.bin").touch()
    reopened.take(ws, "s1")
    assert hashlib.sha256(torn.read_bytes()).hexdigest() == digest


def test_a_torn_folder_listing_is_reported_as_its_folder(ws, tmp_path):
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0")
    tree = json.loads((tmp_path / "run" / "snapshots" / "s0.json").read_text())["d3"]["tree"]
    tear(tmp_path / "run", tree, b'{"f1.txt":')
    assert SnapshotStore(tmp_path / "run").verify("s0") == ["d3"]


def test_after_a_restore_the_next_snapshot_reads_only_the_files_the_restore_wrote(ws, tmp_path, monkeypatch):
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", changes=store.changes)
    (ws / "d0" / "f0.txt").write_text("later\n")
    store.changes.ran_agent_code()
    store.take(ws, "s1", changes=store.changes)
    resumed = SnapshotStore(tmp_path / "run")  # as a resumed run does
    resumed.restore("s0", ws)
    counter = OpenCounter(monkeypatch)
    manifest = resumed.take(ws, "s2", changes=resumed.changes)
    assert counter.names == ["f0.txt"]
    assert manifest_state(manifest) == manifest_state(store.manifest("s0")) == state(ws)


@pytest.mark.parametrize("patterns", [["d1/*"], ["top.py", "d3/inner"], ["*.bin"], ["d?/f1*"]])
def test_read_only_state_enters_only_folders_a_pattern_can_reach(ws, tmp_path, monkeypatch, patterns):
    from mlab.core.run.env_settings import EnvSettings
    from mlab.core.run.read_only_guard import ReadOnlyGuard
    from mlab.core.run.readonly import is_read_only
    from mlab.core.run.workspace import Workspace
    from mlab.core.sandbox.local import LocalSandbox

    rules = EnvSettings(workspace=ws, read_only_patterns=patterns, sandbox=LocalSandbox(),
                        store=SnapshotStore(tmp_path / "run"))
    guard = ReadOnlyGuard(rules, Workspace(rules))
    expected = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*")
                      if is_read_only(p.relative_to(ws).as_posix(), patterns))
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda fd: listed.append(os.readlink(f"/proc/self/fd/{fd}")) or real_scandir(fd))
    assert sorted(guard.state()) == expected
    topmost = [rel for rel in expected if not any(rel.startswith(other + "/") for other in expected)]
    assert guard.paths() == [ws / rel for rel in topmost]
    if patterns[0].startswith(("d1", "top")):  # a literal folder: nothing else is entered
        assert {Path(p).relative_to(ws).as_posix() for p in listed} <= {".", "d1", "d1/inner", "d3", "d3/inner"}


# ---- in a run: the harness tells the store what its actions changed --------------------------------

def plan_run(run_dir: Path, plan: list):
    """A run of the harness fixture's task by an agent playing `plan`, then submitting."""
    from mlab.core import Action, Agent, RunConfig
    from mlab.core.run.runner import Runner
    from mlab.core.sandbox.limits import Limits
    from tests.fixtures.harness import TASK_NAME, fixture_registry

    class Player(Agent):
        name = "snapshot-plan"
        description = "test agent"
        needs_llm = False

        def __init__(self, ctx):
            super().__init__(ctx)
            self.position = 0

        def step(self, state):
            if self.position < len(plan):
                self.position += 1
                return plan[self.position - 1]
            return Action(name="Final Answer", args={"final_answer": "done"})

        def state_dict(self):
            return {"position": self.position}

        def load_state_dict(self, state):
            self.position = state.get("position", 0)

    registry = fixture_registry()
    registry.items["agents"]["snapshot-plan"] = Player
    config = RunConfig(task=TASK_NAME, agent="snapshot-plan", max_steps=20, action_timeout_s=30,
                       sandbox="unconfined")
    return Runner(run_dir, config, registry, limits=Limits(min_free_disk_bytes=None), warn=lambda _t: None)


def test_a_run_reuses_snapshots_of_steps_that_changed_nothing_and_walks_after_agent_code(tmp_path, monkeypatch):
    from mlab.core import Action
    from mlab.core.fs import tree_index

    scans: list[str] = []
    real_scan = tree_index.Scanner.scan

    def counting_scan(self, fd, prefix, *rest):
        if not prefix and self.only is None:
            scans.append("walk")  # a walk of the whole workspace starts at its root, limited to no folders
        return real_scan(self, fd, prefix, *rest)

    monkeypatch.setattr(tree_index.Scanner, "scan", counting_scan)
    plan = [Action(name="List Files", args={"dir_path": "."}),
            Action(name="Write File", args={"file_name": "sub/new.txt", "content": "new\n"}),
            Action(name="Read File", args={"file_name": "sub/new.txt"}),
            Action(name="Execute Script", args={"script_name": "step.py"}),
            Action(name="Write File", args={"file_name": "/etc/refused", "content": "x"})]
    run_dir = tmp_path / "run"
    trace = plan_run(run_dir, plan).start()
    assert trace.status == "finished" and len(trace.steps) == 6
    snapshots = run_dir / "snapshots"
    inode = {i: os.stat(snapshots / f"step_{i:04d}.json").st_ino for i in range(7)}
    assert inode[1] == inode[0] and inode[3] == inode[2] and inode[5] == inode[4] and inode[6] == inode[5]
    assert inode[2] != inode[1] and inode[4] != inode[3]
    assert scans == ["walk", "walk"]  # the first snapshot and the one after the script, nothing else
    store = SnapshotStore(run_dir)
    assert store.manifest("step_0002")["sub/new.txt"]["size"] == 4
    assert manifest_state(store.manifest("final")) == {
        rel: digest for rel, digest in state(run_dir / "workspace").items() if not rel.startswith("data/")}


def killed_after_two_writes(run_dir: Path) -> list:
    """A run that wrote a.txt and b.txt, one a step, stopped as a kill would stop it after the second step's
    commit; the plan, to resume it with."""
    from mlab.core import Action

    plan = [Action(name="Write File", args={"file_name": "a.txt", "content": "first\n"}),
            Action(name="Write File", args={"file_name": "b.txt", "content": "second\n"})]

    class Stop(BaseException):  # like a kill: not caught by the run loop
        pass

    def stop_after_two(step):
        if step.index == 2:
            raise Stop

    runner = plan_run(run_dir, plan)
    runner.on_step = stop_after_two
    with pytest.raises(Stop):
        runner.start()
    runner._release_lock()
    return plan


def test_a_resumed_run_whose_last_snapshot_was_torn_does_that_step_again(tmp_path):
    run_dir = tmp_path / "run"
    plan = killed_after_two_writes(run_dir)
    digest = SnapshotStore(run_dir).manifest("step_0002")["b.txt"]["sha256"]
    tear(run_dir, digest, b"sec")  # what a power cut before the sync can leave
    resumed = plan_run(run_dir, plan).resume()
    assert resumed.status == "finished" and [s.action.name for s in resumed.steps] == [
        "Write File", "Write File", "Final Answer"]
    assert (run_dir / "workspace" / "b.txt").read_text() == "second\n"
    assert "snapshot step_0002 is damaged (b.txt): step 2 is done again" in (run_dir / "errors.log").read_text()
    assert SnapshotStore(run_dir).verify("final") == []


def test_a_walk_after_agent_code_reads_exactly_the_entries_whose_stat_moved(ws, tmp_path, monkeypatch):
    """Unchanged files are matched by their stat alone; every kind of change around them is still seen: a
    file changed in an otherwise unchanged folder, one whose mtime was put back with utime (its ctime moved),
    a folder replaced by a file and a file replaced by a folder."""
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", changes=store.changes)
    (ws / "d0" / "f7.txt").write_text("changed alone in its folder\n")
    same_size = ws / "d1" / "f2.txt"
    before = same_size.stat()
    same_size.write_text("FOLDER 1 FILE 2\n")  # as long as before
    os.utime(same_size, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert same_size.stat().st_size == before.st_size and same_size.stat().st_mtime_ns == before.st_mtime_ns
    import shutil
    shutil.rmtree(ws / "d2" / "inner")
    (ws / "d2" / "inner").write_text("a file where a folder was\n")
    (ws / "d3" / "f4.txt").unlink()
    (ws / "d3" / "f4.txt").mkdir()
    (ws / "d3" / "f4.txt" / "in.txt").write_text("a folder where a file was\n")
    store.changes.ran_agent_code()
    counter = OpenCounter(monkeypatch)
    manifest = store.take(ws, "s1", changes=store.changes)
    assert sorted(counter.names) == ["f2.txt", "f7.txt", "in.txt", "inner"]
    assert manifest_state(manifest) == state(ws)
    fresh = SnapshotStore(tmp_path / "fresh")
    fresh.take(ws, "s")
    assert listing_bytes(tmp_path / "run", "s1") == listing_bytes(tmp_path / "fresh", "s")


@pytest.mark.parametrize("limit", [3, 50, 115])
@pytest.mark.slow
def test_the_entry_limit_cuts_a_walk_of_a_recorded_tree_as_it_cuts_a_first_one(ws, tmp_path, monkeypatch, limit):
    """Unchanged files are counted a folder at a time; the limit still falls where it did entry by entry."""
    import functools

    import mlab.core.run.snapshot as snapshot

    store = SnapshotStore(tmp_path / "run")
    first = manifest_state(store.take(ws, "s0"))
    monkeypatch.setattr(snapshot, "WalkLimits", functools.partial(snapshot.WalkLimits, max_entries=limit))
    (ws / "d4" / "f1.txt").write_text("changed\n")
    manifest = manifest_state(store.take(ws, "s1"))
    assert f"only the first {limit} entries" in store.left_out
    # what the walk did not reach stays as recorded before
    assert set(manifest) == set(first) and all(manifest[rel] in (first[rel], state(ws)[rel]) for rel in manifest)
    monkeypatch.undo()
    manifest = store.take(ws, "s2")
    assert store.left_out == "" and manifest_state(manifest) == state(ws)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.slow
def test_a_folder_agent_code_filled_with_names_is_listed_only_up_to_the_entry_limit(ws, tmp_path, monkeypatch,
                                                                                     split, request):
    """Names beyond the limit's worth are never read into the harness's memory, nor into the split walk's
    child's: the listing itself stops."""
    import functools
    import tracemalloc

    import mlab.core.run.snapshot as snapshot
    from mlab.core.fs import split_walk, tree_index

    if split:
        request.getfixturevalue("split_walks")
    store = SnapshotStore(tmp_path / "store")
    store.take(ws, "s0")
    # a new folder, or with a split walk the recorded folder the child lists last
    flood = ws / ([prefix for prefix, _f in split_walk._folders(store._index[2])][-1] if split else "d1/flood")
    flood.mkdir(exist_ok=True)
    (flood / "flood-0").write_text("x")
    for i in range(1, 30_000):  # names without new inodes: a hard link each
        os.link(flood / "flood-0", flood / f"flood-{i}")
    counts = tmp_path / "listed-counts"  # appended to by the harness and by the split walk's child

    def counting(real, fd, files, listed, most):
        try:
            return real(fd, files, listed, most)
        finally:
            with open(counts, "a") as out:
                out.write(f"{len(listed)}\n")

    for module in (tree_index, split_walk):
        monkeypatch.setattr(module, "changed_entries", functools.partial(counting, module.changed_entries))
    monkeypatch.setattr(snapshot, "WalkLimits", functools.partial(snapshot.WalkLimits, max_entries=200))
    store.changes.ran_agent_code()
    tracemalloc.start()
    try:
        store.take(ws, "s1", changes=store.changes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "only the first 200 entries" in store.left_out
    listed = [int(n) for n in counts.read_text().split()]
    assert max(listed) <= 200 + 200  # the limit, plus at most what the folders held at the last walk
    assert peak < 2_000_000, f"{peak} bytes at the peak"


def test_a_walk_whose_child_failed_lists_every_folder_itself(ws, tmp_path, split_walks, monkeypatch):
    from mlab.core.fs import split_walk

    monkeypatch.setattr(split_walk, "_answer", lambda *_args: os._exit(3))  # the child dies without a word
    store = SnapshotStore(tmp_path / "store")
    store.take(ws, "s0")
    (ws / "d4" / "f0.txt").write_text("changed by agent code\n")
    (ws / "d3" / "f1.txt").unlink()
    store.changes.ran_agent_code()
    manifest = store.take(ws, "s1", changes=store.changes)
    assert manifest_state(manifest) == state(ws)
    assert [split.used for split in split_walks if split is not None] == [0]


def test_a_walk_cut_at_the_entry_limit_ends_its_child_without_waiting_for_it(ws, tmp_path, split_walks, monkeypatch):
    """The child may still be listing a folder agent code filled with millions of names: it is killed, not
    waited for."""
    import functools

    import mlab.core.run.snapshot as snapshot
    from mlab.core.fs import split_walk

    store = SnapshotStore(tmp_path / "store")
    store.take(ws, "s0")
    monkeypatch.setattr(split_walk, "_answer", lambda *_args: time.sleep(10 ** 6))  # a child that never answers
    monkeypatch.setattr(snapshot, "WalkLimits", functools.partial(snapshot.WalkLimits, max_entries=3))
    store.changes.ran_agent_code()
    store.take(ws, "s1", changes=store.changes)  # a take that waited for the child would hang here
    assert "only the first 3 entries" in store.left_out
    child = [split for split in split_walks if split is not None][0]
    assert child._pid == 0  # reaped


def counted_syncs(monkeypatch) -> list[str]:
    """Every fsync, fdatasync and syncfs this process makes from now on, by kind."""
    from mlab.core.fs import durable

    made: list[str] = []

    def counting(name: str):
        real = getattr(os, name)

        def count(fd):
            made.append(name)
            return real(fd)
        return count

    for name in ("fsync", "fdatasync"):
        monkeypatch.setattr(os, name, counting(name))
    libc = durable._libc()

    class Counting:
        def syncfs(self, fd):
            made.append("syncfs")
            return libc.syncfs(fd) if libc is not None else 0

    monkeypatch.setattr(durable, "_libc", Counting)
    return made


def test_a_step_is_committed_by_one_flush_of_the_runs_file_system(tmp_path, monkeypatch):
    """A step's snapshot, its states and its trace line become durable together, by one syncfs: a crash before it
    returns leaves a step that a resume finds torn and does again (issue 42 item 3: two syncs a step, each growing
    with the runs beside it, were most of a bench run's cost in the loop)."""
    from mlab.core import Action

    steps = 4

    def plan(n: int) -> list:
        return [Action(name="Write File", args={"file_name": f"f{i}.txt", "content": f"{i}\n"}) for i in range(n)]

    plan_run(tmp_path / "prepares", []).start()  # the task's prepare syncs what it made, once
    made = counted_syncs(monkeypatch)
    counts = []
    for n in (steps, 2 * steps):
        made.clear()
        assert plan_run(tmp_path / f"run{n}", plan(n)).start().status == "finished"
        counts.append(list(made))
    assert Counter(counts[1]) - Counter(counts[0]) == Counter(syncfs=steps), counts  # one syncfs a step
    assert len(counts[1]) - len(counts[0]) == steps, counts  # and nothing else more
    assert len(counts[0]) - (steps + 1) == 2, counts  # its final answer is a step too; one at the start, one at the end


def test_a_steps_flush_runs_while_the_next_step_asks_its_model_and_ends_before_its_line(tmp_path, monkeypatch):
    """The flush of step k runs in the background while step k+1 asks its model (a model call takes longer than a
    flush, so no step waits for one: at 1,024 runs on 2 cores each step's commit took 0.3 s, issue 42 item 3), and
    ends before step k+1's line is written, so a crash never keeps a step whose step before it is torn."""
    import mlab.core.run.runner as runner_module
    from mlab.core import Action
    from mlab.core.fs import durable

    next_step_asked = {}  # step index -> Event: its model call began
    # (its step, step lines when it began and at its end, whether the next step had asked its model by its end)
    flushed: list[tuple[int, int, int, bool]] = []
    real_step, real_syncfs = runner_module.agent_step, durable._syncfs
    log = tmp_path / "run" / "steps.jsonl"

    def lines() -> int:  # step lines
        return log.read_bytes().count(b'{"kind":"step"') if log.exists() else 0

    def agent_step(agent, state):
        next_step_asked.setdefault(state.step_index, threading.Event()).set()
        return real_step(agent, state)

    def syncfs(libc, fd, where):
        step = count = lines()  # the step whose line is the last
        if threading.current_thread().name == "mlab-flush" and step < 4:  # not the last step's (the answer)
            assert next_step_asked.setdefault(step + 1, threading.Event()).wait(60)  # a hang guard
        real_syncfs(libc, fd, where)
        overlapped = step + 1 in next_step_asked and next_step_asked[step + 1].is_set()
        flushed.append((step, count, lines(), overlapped))

    monkeypatch.setattr(runner_module, "agent_step", agent_step)
    monkeypatch.setattr(durable, "_syncfs", syncfs)
    plan = [Action(name="Write File", args={"file_name": f"f{i}.txt", "content": f"{i}\n"}) for i in range(3)]
    trace = plan_run(tmp_path / "run", plan).start()
    assert trace.status == "finished" and len(trace.steps) == 4
    assert [step for step, *_ in flushed] == [0, 1, 2, 3, 4, 4], flushed  # begin, 4 steps, the end
    assert [overlapped for step, *_, overlapped in flushed if step in (1, 2, 3)] == [True] * 3, flushed
    assert all(count == end for _, count, end, _ in flushed), flushed  # no line written while a flush ran


def test_a_step_whose_listing_a_crash_lost_is_done_again(tmp_path):
    run_dir = tmp_path / "run"
    plan = killed_after_two_writes(run_dir)
    (run_dir / "snapshots" / "step_0002.json").write_bytes(b"")  # renamed in place, its bytes never written
    resumed = plan_run(run_dir, plan).resume()
    assert resumed.status == "finished" and [s.action.name for s in resumed.steps] == [
        "Write File", "Write File", "Final Answer"]
    assert "snapshot step_0002 is damaged" in (run_dir / "errors.log").read_text()
    (run_dir / "snapshots" / "step_0002.json").unlink()  # never renamed into place
    assert SnapshotStore(run_dir).verify("step_0002") != []


class Listed:
    """The workspace folders the store lists (each by its path), through the one listing function every walk uses."""

    def __init__(self, monkeypatch):
        from mlab.core.fs import tree_index

        self.paths: list[str] = []
        real = tree_index.changed_entries

        def listing(fd, *args):
            self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            return real(fd, *args)

        monkeypatch.setattr(tree_index, "changed_entries", listing)


def test_a_folder_whose_every_name_is_read_only_is_never_listed(tmp_path, monkeypatch):
    """A task like contrails holds 20,000 read-only record folders in train/ (`train/*`): a snapshot leaves every
    one out, yet listed train/ whole at each step after unconfined code (14 ms of a step's CPU). Now the rule tells
    the walk no name in it can be recorded, so train/ is not listed, first snapshot or later."""
    from mlab.core.run.readonly import read_only_rule

    ws = tmp_path / "ws"
    for record in range(40):
        (ws / "train" / f"r{record:03d}").mkdir(parents=True)
        (ws / "train" / f"r{record:03d}" / "band.npy").write_bytes(b"x" * 10)
    (ws / "train" / "loose.txt").write_text("read-only too\n")
    (ws / "src").mkdir()
    (ws / "src" / "model.py").write_text("print('model')\n")
    skip = read_only_rule(("train/*",))
    listed = Listed(monkeypatch)
    store = SnapshotStore(tmp_path / "run")
    assert set(store.take(ws, "s0", skip=skip)) == {"src/model.py"}
    store.changes.ran_agent_code()  # as after an unconfined script: the next snapshot walks everything
    store.changes.code_ended({})
    (ws / "src" / "model.py").write_text("print('changed')\n")
    assert set(store.take(ws, "s1", skip=skip, changes=store.changes)) == {"src/model.py"}
    assert not [path for path in listed.paths if "/train" in path], listed.paths
    assert sum(path.endswith("/ws") for path in listed.paths) == 2, listed.paths


def test_a_pattern_that_leaves_some_names_writable_keeps_its_folder_listed(tmp_path):
    """`train/[!.]*` matches any name a probe could try, but not `.notes`: that file is the agent's to write, so
    its folder is listed and the file recorded (and the read-only guard does not take the folder for read-only as
    a whole, which a confining sandbox would mount read-only)."""
    from mlab.core.run.readonly import read_only_rule

    ws = tmp_path / "ws"
    (ws / "train").mkdir(parents=True)
    (ws / "train" / "a.npy").write_bytes(b"x")
    (ws / "train" / ".notes").write_text("mine\n")
    rule = read_only_rule(("train/[!.]*",))
    assert not rule.any_name_matches("train") and not rule.covers("train")
    assert set(SnapshotStore(tmp_path / "run").take(ws, "s0", skip=rule)) == {"train/.notes"}


@pytest.mark.parametrize(("patterns", "folder", "every"), [
    (("train/*",), "train", True), (("train/**",), "train", True), (("r*/*",), "rec", True),
    (("data",), "data/sub", True), (("train/*.npy",), "train", False), (("train/?",), "train", False),
    (("train/*",), "training", False), (("train/*",), "src", False), (("*",), "anything", True)])
def test_every_name_in_a_folder_is_decided_from_the_patterns_text(patterns, folder, every):
    from mlab.core.run.readonly import read_only_rule

    rule = read_only_rule(patterns)
    assert (rule.covers(folder) or rule.any_name_matches(folder)) is every  # every path below it is read-only


def test_a_runs_snapshots_never_list_its_read_only_folder(tmp_path, monkeypatch):
    """The run's own skip is the task's read-only rule: fixture/counter's `data/*` folder is not listed at any
    step, in the unconfined sandbox where every step after a script walks the workspace."""
    from mlab.core.bench.engines import execute_job
    from mlab.core.models import RunConfig
    from tests.fixtures.harness import fixture_registry

    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    config = RunConfig(task="fixture/counter", agent="fixture-stepper", sandbox="unconfined", max_steps=10,
                       agent_options={"steps": 4})
    listed = Listed(monkeypatch)
    result = execute_job({"mode": "start", "config": config.model_dump(), "run_dir": str(tmp_path / "run"),
                          "key": "1"}, fixture_registry())  # type: ignore[typeddict-item]
    assert result["status"] == "finished", result
    workspace = str(tmp_path / "run" / "workspace")
    assert sum(path == workspace for path in listed.paths) >= 3, listed.paths  # walked after each script
    assert not [path for path in listed.paths if path.startswith(workspace + "/data")], listed.paths


class Unconfined:
    """As Execute Script brackets a script in the unconfined sandbox: agent code ran, and ended with its whole
    tree (the sandbox killed it), unconfined."""

    def __init__(self, store: SnapshotStore):
        self.store = store

    def __enter__(self):
        self.store.changes.ran_agent_code()

    def __exit__(self, *exc):
        self.store.changes.code_ended({}, confined=False, reaped=True)


def unconfined_tree(tmp_path: Path) -> tuple[Path, SnapshotStore]:
    ws = tmp_path / "ws"
    for d in range(5):
        (ws / f"d{d}").mkdir(parents=True)
        for f in range(40):
            (ws / f"d{d}" / f"f{f}.txt").write_text(f"folder {d} file {f}\n")
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", changes=store.changes)
    with Unconfined(store):
        (ws / "d0" / "f0.txt").write_text("first command\n")
    assert manifest_state(store.take(ws, "s1", changes=store.changes)) == state(ws)  # walks, watching each file
    return ws, store


def test_a_step_after_unconfined_code_looks_only_at_what_changed(tmp_path, monkeypatch):
    """A step after unconfined code listed every folder and lstatted every file (50,000 writable files: 81 ms of
    CPU), since unconfined code may write through a hard link it made anywhere, which no folder's event tells. Now
    each recorded file's inode has a watch too, so such a step costs what changed."""
    ws, store = unconfined_tree(tmp_path)
    listed = Listed(monkeypatch)
    with Unconfined(store):
        (ws / "d3" / "f2.txt").write_text("second command\n")
    assert manifest_state(store.take(ws, "s2", changes=store.changes)) == state(ws)
    with Unconfined(store):
        (ws / "d1" / "new.txt").write_text("a new file\n")
    assert manifest_state(store.take(ws, "s3", changes=store.changes)) == state(ws)
    assert listed.paths == [str(ws), str(ws / "d1")], listed.paths  # the new file's folder, and the way to it


def test_writes_through_a_link_made_outside_are_seen_after_unconfined_code(tmp_path, monkeypatch):
    """Unconfined code links a workspace file from outside the workspace, and a later command writes through
    that link, in place and through a shared mapping of a process that has ended: the file's inode watch names
    it, under its name and under the name it was renamed to meanwhile."""
    ws, store = unconfined_tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    with Unconfined(store):
        os.link(ws / "d0" / "f3.txt", outside / "far.txt")
        os.link(ws / "d1" / "f4.txt", outside / "moved.txt")
    assert manifest_state(store.take(ws, "s2", changes=store.changes)) == state(ws)
    with Unconfined(store):
        with open(outside / "far.txt", "r+") as far:
            far.write("hacked")
        os.rename(ws / "d1" / "f4.txt", ws / "d2" / "moved.txt")
    assert manifest_state(store.take(ws, "s3", changes=store.changes)) == state(ws)
    assert (ws / "d0" / "f3.txt").read_text().startswith("hacked")
    listed = Listed(monkeypatch)
    with Unconfined(store):
        subprocess.run([sys.executable, "-c", "import mmap, sys\n"
                        "with open(sys.argv[1], 'r+b') as f:\n"
                        "    m = mmap.mmap(f.fileno(), 0)\n"
                        "    m[:6] = b'MAPPED'\n", str(outside / "moved.txt")], check=True)
    after = store.take(ws, "s4", changes=store.changes)
    assert (ws / "d2" / "moved.txt").read_bytes().startswith(b"MAPPED")
    assert manifest_state(after) == state(ws)
    assert listed.paths == [], listed.paths


def test_a_file_written_in_a_loop_does_not_overflow_the_events(tmp_path, monkeypatch):
    """Each write is one event, of the file's inode watch alone (its folder's watch tells only what comes and
    goes), so 40,000 writes merge into one queued event instead of filling the queue (16,384 events) and making
    the next step walk everything again."""
    ws, store = unconfined_tree(tmp_path)
    listed = Listed(monkeypatch)
    with Unconfined(store):
        subprocess.run([sys.executable, "-c", "import os, sys\n"
                        "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
                        "for i in range(40000):\n"
                        "    os.write(fd, b'.')\n", str(ws / "d4" / "f9.txt")], check=True)
    assert manifest_state(store.take(ws, "s2", changes=store.changes)) == state(ws)
    assert listed.paths == [], listed.paths


def test_past_the_watch_limit_a_step_after_unconfined_code_walks(tmp_path, monkeypatch):
    """A file whose inode watch is refused (the user's watch limit): the folders keep watches that tell
    everything, and a step after unconfined code walks the workspace as before, seeing a write through a link
    made outside."""
    from mlab.core.fs.change_watch import ChangeWatch

    def refused(self, dir_fd, name, prefix):
        self.files_refused = True

    monkeypatch.setattr(ChangeWatch, "add_file", refused)
    ws, store = unconfined_tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    with Unconfined(store):
        os.link(ws / "d2" / "f5.txt", outside / "far.txt")
    store.take(ws, "s2", changes=store.changes)
    listed = Listed(monkeypatch)
    with Unconfined(store):
        (outside / "far.txt").write_text("hacked\n")
    assert manifest_state(store.take(ws, "s3", changes=store.changes)) == state(ws)
    assert (ws / "d2" / "f5.txt").read_text() == "hacked\n"
    assert len(listed.paths) == 6, listed.paths  # every folder
    (ws / "d3" / "f1.txt").write_text("the harness's own write\n")  # no agent code: the folders' events tell
    assert manifest_state(store.take(ws, "s4", changes=store.changes)) == state(ws)


def test_files_a_restore_put_back_are_watched_anew(tmp_path):
    """A restore writes files back as new inodes, which have no watch: the next step looks at everything and
    watches them, so a write through a link unconfined code makes to one later is seen."""
    ws, store = unconfined_tree(tmp_path)
    (ws / "d0" / "f7.txt").write_text("changed, to be put back\n")
    store.restore("s1", ws)
    outside = tmp_path / "outside"
    outside.mkdir()
    with Unconfined(store):
        os.link(ws / "d0" / "f7.txt", outside / "far.txt")
    assert manifest_state(store.take(ws, "s2", changes=store.changes)) == state(ws)
    with Unconfined(store):
        (outside / "far.txt").write_text("hacked\n")
    assert manifest_state(store.take(ws, "s3", changes=store.changes)) == state(ws)
    assert (ws / "d0" / "f7.txt").read_text() == "hacked\n"


def test_an_unconfined_script_writing_through_a_link_it_made_outside_is_recorded(tmp_path, monkeypatch):
    """The real unconfined sandbox: one script links a workspace file from outside the workspace, a later one
    writes through that link; the step's snapshot after it records the new content, without listing the
    workspace."""
    from mlab.core.run.readonly import read_only_rule
    from tests.test_read_only_scale import make_images_env, run

    env = make_images_env(tmp_path, "unconfined", count=5)
    store, ws = env.s.store, env.workspace
    skip = read_only_rule(tuple(env.s.read_only_patterns))
    (ws / "src").mkdir()
    (ws / "src" / "model.py").write_text("weights = 1\n")
    far = tmp_path / "far.py"
    try:
        store.take(ws, "s0", skip=skip, changes=store.changes)
        obs, err = run(env, f"import os\nos.link('src/model.py', {str(far)!r})\nprint('linked')\n")
        assert not err and "linked" in obs, obs
        store.take(ws, "s1", skip=skip, changes=store.changes)
        listed = Listed(monkeypatch)
        obs, err = run(env, f"open({str(far)!r}, 'w').write('weights = 2\\n')\nprint('wrote')\n")
        assert not err and "wrote" in obs, obs
        manifest = store.take(ws, "s2", skip=skip, changes=store.changes)
        assert manifest["src/model.py"]["sha256"] == hashlib.sha256(b"weights = 2\n").hexdigest()
        assert manifest_state(manifest) == {rel: digest for rel, digest in state(ws).items()
                                            if not skip(rel)}
        assert listed.paths == [], listed.paths
    finally:
        env.close()


def test_a_write_through_one_of_two_workspace_names_of_a_file_changes_both(tmp_path, monkeypatch):
    """Two names in the workspace for one inode: a write through one is an event of the inode's watch, which
    names both, so both are recorded anew without a walk."""
    ws, store = unconfined_tree(tmp_path)
    with Unconfined(store):
        os.link(ws / "d0" / "f1.txt", ws / "d4" / "twin.txt")
    assert manifest_state(store.take(ws, "s2", changes=store.changes)) == state(ws)
    listed = Listed(monkeypatch)
    with Unconfined(store):
        with open(ws / "d4" / "twin.txt", "r+") as twin:
            twin.write("both")
    manifest = store.take(ws, "s3", changes=store.changes)
    assert manifest_state(manifest) == state(ws)
    assert manifest["d0/f1.txt"] == manifest["d4/twin.txt"] and (ws / "d0" / "f1.txt").read_text().startswith("both")
    assert listed.paths == [], listed.paths


@pytest.mark.slow  # 17,000 files made and read: over 2 s on two cores
def test_events_lost_to_a_full_queue_cost_a_walk_not_every_watch_again(tmp_path, monkeypatch):
    """Unconfined code makes more files than the event queue holds (16,384 by default): the events are lost and
    the step walks the workspace, but the watches are all still there, so the step watches only the new files,
    not every file again (a walk plus 50,000 watches: 370 ms), and a write through a link made outside to an old
    file is still an event."""
    from mlab.core.fs.change_watch import ChangeWatch

    with open("/proc/sys/fs/inotify/max_queued_events") as limit:
        queued = int(limit.read())
    ws, store = unconfined_tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    added: list[str] = []
    real_add_file = ChangeWatch.add_file

    def counted(self, dir_fd, name, prefix):
        added.append(prefix + name)
        return real_add_file(self, dir_fd, name, prefix)

    monkeypatch.setattr(ChangeWatch, "add_file", counted)
    with Unconfined(store):
        for number in range(queued + 500):  # in a watched folder: an event each
            (ws / "d0" / f"new{number}.txt").write_text("x")
        os.link(ws / "d3" / "f3.txt", outside / "far.txt")
    assert manifest_state(store.take(ws, "s2", changes=store.changes)) == state(ws)
    # the new files, and a few the walk read again (the linked one's change time moved; one recorded in the clock
    # tick of its write); not the 200 others again
    assert queued + 500 <= len(added) <= queued + 510, len(added)
    added.clear()
    listed = Listed(monkeypatch)
    with Unconfined(store):
        (outside / "far.txt").write_text("hacked\n")
    assert manifest_state(store.take(ws, "s3", changes=store.changes)) == state(ws)
    assert (ws / "d3" / "f3.txt").read_text() == "hacked\n" and listed.paths == [] and len(added) <= 1, added


@pytest.mark.parametrize("seed", range(4))
def test_steps_after_unconfined_code_match_the_workspace_whatever_it_did(tmp_path, seed):
    """Random commands of unconfined code (writes in place and through links made outside or inside, renames,
    removals, new files and folders, mode changes, truncation), a snapshot after each: each equals the workspace,
    contents and modes."""
    import random

    ws, store = unconfined_tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    rng = random.Random(seed)
    made = 0

    def files() -> list[Path]:
        return sorted(p for p in ws.rglob("*") if p.is_file() and not p.is_symlink())

    for step in range(40):
        with Unconfined(store):
            for _ in range(rng.randint(1, 4)):
                made += 1
                target = rng.choice(files())
                action = rng.choice(["write", "link_out", "write_out", "rename", "remove", "new", "folder", "chmod",
                                     "truncate", "link_in"])
                if action == "write":
                    with open(target, "r+") as f:
                        f.write(f"w{made}")
                elif action == "link_out":
                    os.link(target, outside / f"l{made}")
                elif action == "write_out" and list(outside.iterdir()):
                    with open(rng.choice(sorted(outside.iterdir())), "a") as f:
                        f.write(f"far{made}")
                elif action == "rename":
                    folder = rng.choice(sorted(p for p in ws.rglob("*") if p.is_dir()) + [ws])
                    os.rename(target, folder / f"r{made}.txt")
                elif action == "remove" and len(files()) > 20:
                    target.unlink()
                elif action == "new":
                    (target.parent / f"n{made}.txt").write_text(f"new {made}\n")
                elif action == "folder":
                    (ws / f"g{made}").mkdir()
                    (ws / f"g{made}" / "x.txt").write_text(f"in g{made}\n")
                elif action == "chmod":
                    target.chmod(rng.choice([0o600, 0o644, 0o755]))
                elif action == "truncate":
                    os.truncate(target, rng.randint(0, 5))
                elif action == "link_in":
                    os.link(target, target.parent / f"k{made}.txt")
        manifest = store.take(ws, f"r{step}", changes=store.changes)
        assert manifest_state(manifest) == state(ws), (seed, step)
        assert {rel: entry["mode"] for rel, entry in manifest.items()} == {
            rel: (ws / rel).stat().st_mode & 0o777 for rel in state(ws)}, (seed, step)


def test_the_same_read_only_rule_built_again_keeps_the_recorded_tree(tmp_path, monkeypatch):
    """The store keeps its record while the skip is the same: a rule built again for the same patterns (the cache
    of rules evicted it) is the same skip, so the next step does not walk the workspace again."""
    from mlab.core.run.readonly import ReadOnlyRule

    ws = tmp_path / "ws"
    make_tree(ws)
    store = SnapshotStore(tmp_path / "run")
    store.take(ws, "s0", skip=ReadOnlyRule(("d0/*",)), changes=store.changes)
    listed = Listed(monkeypatch)
    (ws / "d1" / "f1.txt").write_text("the harness's write\n")
    manifest = store.take(ws, "s1", skip=ReadOnlyRule(("d0/*",)), changes=store.changes)
    assert manifest_state(manifest) == {rel: digest for rel, digest in state(ws).items() if not rel.startswith("d0/")}
    assert listed.paths == [], listed.paths
