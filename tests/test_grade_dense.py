"""`mlab grade` of a folder holds the file the task reads as its submission to the task's own size limit before it
copies a byte (issue 44 item 17): a dense submission.csv over `max_submission_bytes` was copied whole, up to the
8 GiB a folder may hold, and only then refused by the task's evaluate. Other files of the folder (a saved model
the task's scorer loads) are still held only to the folder's limit."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cli import mlab_in_process

CAP = 4096
DENSE = 16 * 2**20  # real data, every block written: a copy of it would pass 16 MiB to write(2)


def written() -> int:
    """Bytes this process has passed to write(2) and its kin (sendfile, copy_file_range), from /proc."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("wchar:")).split()[1])


@pytest.fixture(scope="module")
def capped_task(tmp_path_factory) -> tuple[Path, Path]:
    """A task.yaml task (`mlab new-task`) whose submission file is predictions.csv, refused over CAP bytes; prepared."""
    root = tmp_path_factory.mktemp("dense")
    folder = root / "capped"
    subprocess.run([str(Path(sys.executable).with_name("mlab")), "new-task", str(folder)], check=True,
                   capture_output=True)
    spec = folder / "task.yaml"
    text = spec.read_text().replace("submission: {file: submission.csv,", "submission: {file: predictions.csv,")
    assert "predictions.csv" in text
    spec.write_text(text + f"max_submission_bytes: {CAP}\n")
    home = root / "home"
    prepared = mlab_in_process("prepare", folder, home=home)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    return folder, home


def answers(home: Path) -> list[list[str]]:
    found, = home.glob("tasks/*/hidden/answers.csv")
    with open(found, newline="") as f:
        return list(csv.reader(f))


def test_a_dense_submission_over_the_tasks_limit_in_a_folder_is_refused_before_a_byte_is_copied(capped_task,
                                                                                                   tmp_path):
    folder, home = capped_task
    submission = tmp_path / "sub"
    submission.mkdir()
    with open(submission / "predictions.csv", "wb") as f:
        f.write(b"id,y\n" + os.urandom(DENSE))
    (submission / "notes.txt").write_text("fine\n")
    before = written()
    result = mlab_in_process("grade", folder, submission, home=home, env={"TMPDIR": str(tmp_path)})
    spent = written() - before
    out = result.stdout + result.stderr
    assert spent < 2**20, (spent, out)  # nothing of it was copied
    assert result.returncode == 2, out  # refused, one line: never scored
    held = (submission / "predictions.csv").stat().st_blocks * 512  # what it holds on disk
    assert f"predictions.csv: {held} bytes, more than the task's {CAP}" in out, out
    assert "Traceback" not in out


def test_a_file_the_task_does_not_read_as_its_submission_may_exceed_its_limit(capped_task, tmp_path):
    """A workspace may hold a model bigger than the submission limit, which a task's scorer loads: still graded."""
    folder, home = capped_task
    submission = tmp_path / "sub"
    (submission / "output").mkdir(parents=True)
    (submission / "output" / "model.bin").write_bytes(os.urandom(4 * CAP))
    with open(submission / "predictions.csv", "w", newline="") as f:
        csv.writer(f).writerows(answers(home))  # the answers themselves: a perfect score
    assert (submission / "predictions.csv").stat().st_size <= CAP
    result = mlab_in_process("grade", folder, submission, "--json", home=home, env={"TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert '"score": 0.0' in result.stdout, result.stdout


def test_a_submission_grown_after_the_survey_is_refused_by_the_descriptor_it_would_be_copied_from(tmp_path):
    """The survey looks by name; the copy checks the file it opened (fstat), so a file that grew in between is
    refused there, before its data is read, and no target is made."""
    from mlab.core.run.intake import SubmissionRefused, _Copier

    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "submission.csv").write_bytes(os.urandom(4 * CAP))  # as it is once the survey has passed
    copy = _Copier(str(folder), str(folder), CAP, frozenset({"submission.csv"}), 2**30)
    with pytest.raises(SubmissionRefused, match=f"more than the task's {CAP}"):
        copy(str(folder / "submission.csv"), str(tmp_path / "copy.csv"))
    assert not (tmp_path / "copy.csv").exists()
    (folder / "model.bin").write_bytes(os.urandom(4 * CAP))  # not the submission: the folder's limit only
    copy(str(folder / "model.bin"), str(tmp_path / "model.bin"))
    assert (tmp_path / "model.bin").read_bytes() == (folder / "model.bin").read_bytes()
    with pytest.raises(SubmissionRefused, match="may hold"):
        _Copier(str(folder), str(folder), 2**30, frozenset(), CAP)(str(folder / "submission.csv"),
                                                                   str(tmp_path / "third.csv"))


def test_a_sparse_file_of_a_folder_is_copied_with_its_holes(tmp_path):
    from mlab.core.run.intake import _Copier

    folder = tmp_path / "sub"
    folder.mkdir()
    with open(folder / "model.bin", "wb") as f:
        f.seek(2**30)
        f.write(b"end")  # 1 GiB apparent, one block of data
    _Copier(str(folder), str(folder), CAP, frozenset(), 2**31)(str(folder / "model.bin"), str(tmp_path / "copy"))
    copied = (tmp_path / "copy").stat()
    assert copied.st_size == 2**30 + 3 and copied.st_blocks * 512 < 2**20
    with open(tmp_path / "copy", "rb") as f:
        f.seek(2**30)
        assert f.read() == b"end"
