"""`mlab check-task` reads each prepare once (issue 42 item 4): the reproducibility check digests both prepared
homes, and the reference's record of the data it was measured on comes from that digest; it read the harness's
home a second time (25% of a check-task of 200,000 files went to hashing). Bytes read are counted from /proc,
not timed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlab.core.run.checktask import check_task, inputs_of, prepared_sums
from mlab.core.run.harness import Harness
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.harness import ReferenceTask, harness_registry

DATA = 24 * 2**20  # read-only data the task prepares: the reads of check-task are counted in its multiples


class BigDataTask(ReferenceTask):
    name = "fixture/big-data"

    def prepare(self, ctx):
        super().prepare(ctx)
        (ctx.public_dir / "data" / "big.bin").write_bytes(bytes(range(256)) * (DATA // 256))
        (ctx.public_dir / "data" / "notes.txt").write_text("notes\n")
        (ctx.public_dir / "data" / "link.txt").symlink_to("notes.txt")
        (ctx.hidden_dir / "deep" / "er").mkdir(parents=True)
        (ctx.hidden_dir / "deep" / "er" / "answer.txt").write_text("42")


def registry():
    reg = harness_registry()
    reg.items["tasks"].setdefault(BigDataTask.name, BigDataTask())
    reg.providers["tasks"].setdefault(BigDataTask.name, "tests")
    return reg


def read() -> int:
    """Bytes this process has read through read(2) and its kin, from /proc."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines()
                    if line.startswith("rchar:")).split()[1])


@pytest.mark.slow
def test_check_task_reads_each_prepared_home_once(tmp_path):
    home = TaskHome(tmp_path / "home")
    harness = Harness(registry(), home)
    before = read()
    report = check_task(harness, BigDataTask(), timeout_s=120)
    spent = read() - before
    assert report.passed, report.reason
    # two prepares digested, once each (the data is linked into each workspace, never read to be copied)
    assert spent < 2.5 * DATA, f"read {spent / DATA:.2f}x the prepared data"
    from mlab.core.run.scoring import reference_path

    assert f'"inputs": "{home.inputs_fingerprint(BigDataTask())}"' in reference_path(home, BigDataTask.name).read_text()


def test_the_digest_and_fingerprint_are_the_task_homes_own(tmp_path):
    """inputs_of is taskdata.inputs_fingerprint: carry_references compares what check-task recorded with what
    prepare computes."""
    home = TaskHome(tmp_path / "home")
    task = BigDataTask()
    home.prepare(task, log=lambda _m: None)
    os.mkfifo(home.public_dir(task) / "fifo")  # an "other"
    many = home.public_dir(task) / "many"
    many.mkdir()
    for number in range(1100):  # more than a batch: hashed by several threads
        (many / f"{number}.txt").write_text(str(number % 7))
    assert inputs_of(prepared_sums(home, task)) == home.inputs_fingerprint(task)
