"""fanotify inode marks (mlab.core.fs.inode_marks), the unconfined guard's watches past inotify's limit: an event
names the marked inode whatever link it came through, a forgotten mark's events are dropped, and an entry that
went is told apart from one that cannot be marked."""
from __future__ import annotations

import os

import pytest

from mlab.core.fs.inode_marks import FAN_ATTRIB, FAN_MODIFY, FAN_OPEN, InodeMarks


@pytest.fixture
def marks():
    found = InodeMarks.open()
    if found is None:
        pytest.skip("no fanotify instance can be had by this user here (Linux before 5.13?)")
    yield found
    found.close()


def test_a_write_through_another_link_names_the_marked_file(tmp_path, marks):
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"a")
    (folder / "b.png").write_bytes(b"b")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first, second = marks.add(fd, "a.png"), marks.add(fd, "b.png")
        assert first is not None and second is not None and first < 0 and second < 0 and first != second
        assert marks.add(fd, "a.png") == first  # the same inode, the same mark
        with pytest.raises(FileNotFoundError):
            marks.add(fd, "gone.png")
    finally:
        os.close(fd)
    assert marks.events() == []
    os.link(folder / "a.png", tmp_path / "elsewhere.png")
    with open(tmp_path / "elsewhere.png", "ab") as out:
        out.write(b"x")
    events = marks.events()
    assert events and {mark for mark, _mask in events} == {first}, events
    mask = 0
    for _mark, bits in events:
        mask |= bits
    assert mask & FAN_MODIFY and mask & FAN_ATTRIB and mask & FAN_OPEN, hex(mask)  # the link, the open, the write
    marks.forget(first)
    (folder / "a.png").write_bytes(b"again")
    (folder / "b.png").read_bytes()
    assert {mark for mark, _mask in marks.events()} == {second}
