"""`mlab grade` of a folder writes no more than the folder holds (issue 44 item 17): a 2 GB sparse submission.csv,
within the 8 GiB a folder may hold, was copied dense (2 GB written) before the task's own size limit refused it."""
from __future__ import annotations

from pathlib import Path

from tests.fixtures.cli import mlab_in_process


def written() -> int:
    """Bytes this process has passed to write(2) and its kin (sendfile, copy_file_range), from /proc."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("wchar:")).split()[1])


def test_a_sparse_file_in_a_graded_folder_is_not_written_out_dense(tmp_path):
    folder = tmp_path / "sub"
    folder.mkdir()
    with open(folder / "submission.csv", "wb") as f:
        f.truncate(2 * 2**30)  # 2 GiB apparent, nothing allocated
    (folder / "notes.txt").write_text("fine\n")
    ok = mlab_in_process("prepare", "lite/wine", home=tmp_path / "home")
    assert ok.returncode == 0, ok.stderr
    before = written()
    result = mlab_in_process("grade", "lite/wine", folder, home=tmp_path / "home",
                             env={"TMPDIR": str(tmp_path)})
    spent = written() - before
    assert result.returncode in (1, 2), result.stdout + result.stderr  # invalid, or refused: never scored
    assert str(2 * 2**30) in result.stdout + result.stderr  # the size the task refuses it for
    assert spent < 64 * 2**20, spent  # the holes stayed holes
