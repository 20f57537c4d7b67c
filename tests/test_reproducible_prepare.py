"""Reproducible tasks: `check-task` prepares a task a second time in a fresh home and fails it when the two
prepared trees differ; a prepare seeded from the task passes, and so does the example pack's line-fit."""
from __future__ import annotations

import json
import os
import random

import pytest

from mlab.core.fs.tree_sums import tree_sums
from mlab.core.run.checktask import REPRODUCIBLE, check_reproducible_prepare, check_task, prepared_sums
from mlab.core.run.harness import Harness
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.cli import mlab_in_process
from tests.fixtures.harness import ReferenceTask, harness_registry
from tests.fixtures.venvs import EXAMPLE_PACK


class NoisyTask(ReferenceTask):
    """Hidden noise from the OS, as CONTRIBUTING once advised: a new test set at every prepare."""

    name = "fixture/noisy-prepare"

    def prepare(self, ctx):
        super().prepare(ctx)
        secret = random.SystemRandom()
        (ctx.hidden_dir / "noise.txt").write_text(f"{secret.gauss(0.0, 1.0):.12f}\n")


class SeededTask(ReferenceTask):
    """The same noise, drawn from a generator seeded by the task."""

    name = "fixture/seeded-prepare"
    seed = 7

    def prepare(self, ctx):
        super().prepare(ctx)
        (ctx.public_dir / "data" / "points.txt").write_text(
            "".join(f"{random.Random(self.seed).random():.12f}\n" for _ in range(50)))
        (ctx.hidden_dir / "noise.txt").write_text(f"{random.Random(self.seed + 1).gauss(0.0, 1.0):.12f}\n")
        os.symlink("big.bin", ctx.public_dir / "data" / "alias.bin")


class ScatteredTask(SeededTask):
    """Many differences of every kind: random file names, a random symlink target, a file or a folder."""

    name = "fixture/scattered-prepare"
    prepares = 0

    def prepare(self, ctx):
        super().prepare(ctx)
        token = os.urandom(4).hex()
        for i in range(8):
            (ctx.public_dir / f"shard-{i}-{token}.txt").write_text("same content\n")
        os.symlink(f"big-{token}.bin", ctx.public_dir / "latest.bin")
        ScatteredTask.prepares += 1
        odd = ctx.hidden_dir / "odd"  # a folder, then a file, then a folder...
        (odd / "inside").mkdir(parents=True) if ScatteredTask.prepares % 2 else odd.write_text("a file\n")


TASKS = (NoisyTask, SeededTask, ScatteredTask)


def registry():
    reg = harness_registry()
    for cls in TASKS:
        reg.items["tasks"].setdefault(cls.name, cls())
        reg.providers["tasks"].setdefault(cls.name, "tests")
    return reg


def entries(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_prepare_drawing_from_the_os_fails_check_task(tmp_path):
    home = TaskHome(tmp_path / "home")
    report = check_task(Harness(registry(), home), NoisyTask(), timeout_s=60)
    assert report.status == "failed"
    assert report.steps[REPRODUCIBLE].startswith("two prepares in fresh homes differ: hidden/noise.txt (content);")
    assert REPRODUCIBLE in report.reason and "hidden/noise.txt" in report.reason
    # the other steps still ran, so the author sees everything that is wrong at once
    assert (report.steps["baseline"], report.steps["reference"]) == ("ok", "ok") and report.reference == 5.0
    assert entries(home.root) == ["tasks"]  # the second home was removed
    assert entries(home.data_root) == [home.task_dir(NoisyTask()).name]


def test_a_seeded_prepare_passes_check_task(tmp_path):
    home = TaskHome(tmp_path / "home")
    report = check_task(Harness(registry(), home), SeededTask(), timeout_s=60)
    assert report.passed, report.reason
    assert report.steps == {"prepare": "ok", REPRODUCIBLE: "ok", "invalid submission": "ok", "baseline": "ok",
                            "reference": "ok"}
    assert REPRODUCIBLE in report.seconds and entries(home.root) == ["tasks"]


def test_the_message_names_a_few_differences_and_counts_the_rest(tmp_path):
    home = TaskHome(tmp_path / "home")
    home.prepare(ScatteredTask(), log=lambda _m: None)
    message = check_reproducible_prepare(Harness(registry(), home), ScatteredTask(), None, prepared_now=True)
    assert message.startswith("two prepares in fresh homes differ: ")
    named = message.split(": ", 1)[1].split(";")[0]
    # 16 shard names (8 only in each home), the symlink's target, and the file that was once a folder
    assert named.count("(") == 5 and named.endswith(" and 13 more")
    assert named.startswith("hidden/odd (a dir, then a file), public/latest.bin (target), ")
    assert "(only in the first)" in named and "(only in the second)" in named and "seed" in message
    assert "hidden/odd/inside" not in message and "prepared.json" not in message  # only a differing folder's top


def test_kinds_of_difference_are_told_apart(tmp_path):
    task = ScatteredTask()
    homes = [TaskHome(tmp_path / name) for name in ("a", "b")]
    for home in homes:
        home.prepare(task, log=lambda _m: None)
    first, second = (prepared_sums(home, task) for home in homes)
    assert first["public/data/alias.bin"] == second["public/data/alias.bin"] == ("symlink", "big.bin")
    assert first["public/latest.bin"][0] == "symlink" and first["public/latest.bin"] != second["public/latest.bin"]
    assert first["public/data"] == ("dir", "") and first["hidden/answer.txt"] == second["hidden/answer.txt"]
    assert not any(key.startswith(("prepared", "baseline")) or "/" not in key for key in first)
    assert tree_sums(homes[0].public_dir(task))["data/big.bin"] == first["public/data/big.bin"]


def test_a_home_prepared_earlier_is_not_what_a_fresh_prepare_is_compared_with(tmp_path):
    # A reused --home may hold files of an older version of the task: both prepares are then made afresh.
    task, home = SeededTask(), TaskHome(tmp_path / "home")
    home.prepare(task, log=lambda _m: None)
    (home.hidden_dir(task) / "noise.txt").write_text("from an older version\n")
    harness = Harness(registry(), home)
    assert check_reproducible_prepare(harness, task, None, prepared_now=False) == "ok"
    assert "differ: hidden/noise.txt (content)" in check_reproducible_prepare(harness, task, None, prepared_now=True)
    assert entries(home.root) == ["tasks"]


def test_a_second_prepare_that_crashes_is_reported(tmp_path):
    class OnceTask(SeededTask):
        name = "fixture/once"
        calls = 0

        def prepare(self, ctx):
            OnceTask.calls += 1
            if OnceTask.calls > 1:
                raise RuntimeError("the download quota is used up")
            super().prepare(ctx)

    report = check_task(Harness(registry(), TaskHome(tmp_path / "home")), OnceTask(), timeout_s=60)
    assert report.status == "failed"
    assert report.steps[REPRODUCIBLE] == ("preparing again in a fresh home failed: "
                                          "RuntimeError: the download quota is used up")


def test_check_task_cli_shows_the_step(tmp_path):
    home = tmp_path / "unused"
    for name, status in (("fixture/seeded-prepare", 0), ("fixture/noisy-prepare", 1)):
        shown = mlab_in_process("check-task", name, "--timeout", "60", registry=registry, home=home)
        assert shown.returncode == status, shown.stdout + shown.stderr
        assert "reproducible prepare " + ("ok" if status == 0 else "FAILED") in shown.stdout
    as_json = mlab_in_process("check-task", "fixture/noisy-prepare", "--json", registry=registry, home=home)
    [report] = json.loads(as_json.stdout)
    assert report["status"] == "failed" and "hidden/noise.txt (content)" in report["steps"][REPRODUCIBLE]


@pytest.fixture
def line_fit(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE_PACK))
    from mlab_example_tasks.line_fit import LineFitTask

    return LineFitTask()


def test_the_example_line_fit_prepares_identically_in_fresh_homes(tmp_path, line_fit):
    homes = [TaskHome(tmp_path / name) for name in ("a", "b")]
    for home in homes:
        home.prepare(line_fit, log=lambda _m: None)
    first, second = (prepared_sums(home, line_fit) for home in homes)
    assert first == second and {"public/train.csv", "public/test.csv", "hidden/answers.csv"} <= set(first)
    report = check_task(Harness(registry(), TaskHome(tmp_path / "check")), line_fit, timeout_s=60)
    assert report.passed, report.reason
    assert report.steps[REPRODUCIBLE] == "ok" and report.reference < report.baseline


@pytest.mark.parametrize("name", [pytest.param("lite/digits", marks=pytest.mark.slow), "lite/diabetes", "lite/wine"])
def test_the_lite_tasks_prepare_identically_in_fresh_homes(tmp_path, name):
    task = registry().get("tasks", name)
    homes = [TaskHome(tmp_path / folder) for folder in ("a", "b")]
    for home in homes:
        home.prepare(task, log=lambda _m: None)
    first, second = (prepared_sums(home, task) for home in homes)
    assert first == second and "hidden/answers.csv" in first
