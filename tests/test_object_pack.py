"""Packs of small objects (mlab.core.run.object_pack): what a reader finds, read as untrusted data."""
from __future__ import annotations

import hashlib
import os

from mlab.core.run.object_pack import PackIndex, PackWriter, read_packed


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def packed(index: PackIndex, digest: str, limit: int) -> bytes | None:
    location = index.find(digest)
    return None if location is None else read_packed(index, location, limit)


def test_a_reader_finds_what_another_process_appended_once_its_index_line_is_whole(tmp_path):
    writer = PackWriter(PackIndex(tmp_path))
    writer.append(sha(b"first"), b"first")
    reader = PackIndex(tmp_path)
    assert packed(reader, sha(b"first"), 100) == b"first"
    assert packed(reader, sha(b"second"), 100) is None
    writer.append(sha(b"second"), b"second")
    assert packed(reader, sha(b"second"), 100) == b"second"  # a miss reads what was indexed since
    assert packed(reader, sha(b"second"), 5) is None  # longer than the caller allows
    # half a line (a writer caught mid-append) is left for the next look
    index = tmp_path / "pack" / f"{writer.name}.idx"
    index.chmod(0o644)
    third = f"{sha(b'third')} 11 5"
    with open(index, "a") as f:
        f.write(third)
    assert reader.find(sha(b"third")) is None
    with open(index, "a") as f:
        f.write("\n")
    found = reader.find(sha(b"third"))
    assert found is not None and (found.offset, found.size) == (11, 5)
    writer.close()


def test_odd_index_names_and_lines_are_skipped_and_the_later_index_wins(tmp_path):
    folder = tmp_path / "pack"
    folder.mkdir()
    digest = sha(b"x")
    older, newer = f"{1:020d}-1-aaaaaaaa", f"{2:020d}-1-aaaaaaaa"
    (folder / f"{older}.idx").write_text(f"{digest} 0 1\nnot a line\n{'z' * 64} 0 1\n{digest} -1 1\n")
    (folder / f"{newer}.idx").write_text(f"{digest} 7 1\n")
    (folder / "odd-name.idx").write_text(f"{sha(b'y')} 0 1\n")
    index = PackIndex(tmp_path)
    index.refresh()
    assert set(index.locations) == {digest}
    assert (index.locations[digest].pack, index.locations[digest].offset) == (newer, 7)


def test_an_untrusted_index_is_read_only_up_to_its_bound(tmp_path):
    folder = tmp_path / "pack"
    folder.mkdir()
    lines = [f"{sha(str(i).encode())} {i} 1\n" for i in range(1000)]
    (folder / f"{1:020d}-1-aaaaaaaa.idx").write_text("".join(lines))
    bounded = PackIndex(tmp_path, max_index_bytes=len(lines[0]) * 10)
    bounded.refresh()
    assert len(bounded.locations) == 10
    whole = PackIndex(tmp_path, max_index_bytes=None)
    whole.refresh()
    assert len(whole.locations) == 1000


def test_packs_are_read_only_files_named_by_time_so_a_later_writer_sorts_last(tmp_path):
    first = PackWriter(PackIndex(tmp_path))
    first.append(sha(b"a"), b"a")
    second = PackWriter(PackIndex(tmp_path))
    second.append(sha(b"b"), b"b")
    assert first.name < second.name
    for name in os.listdir(tmp_path / "pack"):
        assert os.stat(tmp_path / "pack" / name).st_mode & 0o777 == 0o444
    first.close()
    second.close()
