"""Hostile inputs (issue 31, items 5-9 and 13): what mlab reads from packs, archives, submissions and agent code.

Each case reproduces an attack with real files and processes: a declarative pack whose prepare reaches for the
user's secrets and the network, a pack whose files are links out of it, a task.yaml of nested aliases, a Ray
node's archive naming writable files to link, a submission folder of a huge sparse file or a FIFO, and agent
code adding entries under a read-only folder.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_hostile
from test_hostile import TRAIN, HostileTask, Probe, act, run_case, script

from mlab.core.run.read_only_guard import SEPARATE_MOUNTS_MAX

MLAB = Path(sys.executable).with_name("mlab")
SANDBOXES = ["local", "bwrap", "docker"]
parametrize = pytest.mark.parametrize("sandbox", SANDBOXES)


# ---- 13: new entries under a read-only folder ------------------------------------------------------------------

ADD_ENTRIES = ("import os\n"
               "def attempt(what, fn):\n"
               "    try:\n        fn()\n        print('DONE', what)\n"
               "    except OSError as e:\n        print('refused', what, e.strerror)\n"
               "attempt('file', lambda: open('data/new.csv', 'w').write('x'))\n"
               "attempt('folder', lambda: (os.mkdir('data/sub'), open('data/sub/f.txt', 'w').write('x')))\n"
               "attempt('link', lambda: os.symlink(os.path.abspath('..'), 'data/run'))\n")
REPL_ADD = "import os; open('data/repl.csv', 'w').write('x'); os.mkdir('data/rdir')"


@parametrize
def test_new_entries_under_a_read_only_folder_do_not_stay(tmp_path, sandbox):
    """data/* has one file, mounted alone: agent code may add entries beside it, which go after the command,
    and the note says so."""
    seen: list[list[str]] = []
    probe = Probe(lambda: seen.append(sorted(os.listdir(tmp_path / "run" / "workspace" / "data"))))
    run = run_case(tmp_path, sandbox, [*script(ADD_ENTRIES), probe, act("Python REPL", command=REPL_ADD), probe])
    assert seen == [["train.csv"], ["train.csv"]]
    obs, _err = run.step(2)
    assert "[entries added under read-only folders have been removed: data/new.csv, data/run, data/sub]" in obs, obs
    assert "have been restored" not in obs, obs  # nothing read-only was changed, only added to
    obs, _err = run.step(3)
    assert "have been removed: data/rdir, data/repl.csv]" in obs, obs
    assert sorted(os.listdir(run.ws / "data")) == ["train.csv"]


@pytest.mark.parametrize("sandbox", ["local", "bwrap", "docker", "unconfined"])
def test_a_big_read_only_folder_takes_no_new_entry(tmp_path, sandbox, monkeypatch):
    """data/* of more than SEPARATE_MOUNTS_MAX files is mounted whole by a confining sandbox: agent code cannot
    add to it at all. Unconfined, it can, and the entries go after the command."""
    prepare = HostileTask.prepare

    def many(self, ctx):
        prepare(self, ctx)
        for i in range(SEPARATE_MOUNTS_MAX + 8):
            (ctx.public_dir / "data" / f"part{i:03}.csv").write_text(TRAIN)

    monkeypatch.setattr(HostileTask, "prepare", many)
    if sandbox == "unconfined":
        monkeypatch.setattr(test_hostile, "make_sandbox", lambda _name: None)
    run = run_case(tmp_path, sandbox, [*script(ADD_ENTRIES)])
    obs, _err = run.step(2)
    if sandbox == "unconfined":
        assert "have been removed: data/new.csv, data/run, data/sub]" in obs, obs
    else:
        assert "DONE" not in obs and obs.count("Read-only file system") == 3, obs
        assert "have been removed" not in obs
    assert len(os.listdir(run.ws / "data")) == SEPARATE_MOUNTS_MAX + 9
    assert not {"new.csv", "run", "sub"} & set(os.listdir(run.ws / "data"))


# ---- 7: a task.yaml is bounded however it is written ----------------------------------------------------------

def alias_bomb(levels: int = 10, width: int = 9) -> str:
    """A small task.yaml whose nested aliases stand for width**levels values."""
    lines = ["x-bomb:", "  a0: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    lines += [f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\nname: bomb\ndescription: d\nresearch_problem: r\nmetric: accuracy\n" \
                              "answers: {file: a.csv, column: y}\nresources:\n  extras: *a9\n"


def check_task_bounded(folder: Path, memory_bytes: int = 1 << 30) -> subprocess.CompletedProcess:
    """`mlab check-task folder` in a process that may map at most memory_bytes."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run([str(MLAB), "check-task", str(folder)], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit)


@pytest.mark.parametrize("case", ["aliases", "nesting", "size"])
def test_a_hostile_task_yaml_is_one_line_and_exit_2_within_memory(tmp_path, case):
    folder = tmp_path / "pack"
    folder.mkdir()
    text = {"aliases": alias_bomb(), "nesting": "name: " + "[" * 5_000 + "]" * 5_000 + "\n",
            "size": "name: x\n" + "# padding\n" * 200_000}[case]
    (folder / "task.yaml").write_text(text)
    if case == "aliases":
        assert len(text) < 2048
    result = check_task_bounded(folder)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert {"aliases": "once its aliases (*name) are expanded", "nesting": "nests its values too deep",
            "size": "more than the 1000000 a task file may have"}[case] in result.stderr


def test_a_task_yaml_that_is_a_fifo_is_refused_without_waiting(tmp_path):
    from mlab.core.declarative.yamlfile import TaskFileError, load_located

    os.mkfifo(tmp_path / "task.yaml")
    with pytest.raises(TaskFileError, match="is not a regular file"):
        load_located(tmp_path / "task.yaml")


# ---- 9: mlab grade checks kinds and sizes before it copies anything --------------------------------------------

def grade(*args: object, tmp: Path) -> subprocess.CompletedProcess:
    """`mlab grade` with its scratch space (TMPDIR) in a folder of the test's own."""
    tmp.mkdir(exist_ok=True)
    return subprocess.run([str(MLAB), "grade", *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(tmp)})


def test_grade_refuses_a_huge_sparse_file_a_fifo_and_a_link_out_before_any_copy(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    secret.chmod(0o600)
    folder = tmp_path / "sub"
    folder.mkdir()
    with open(folder / "model.bin", "wb") as f:
        f.truncate(100 * 2**30)  # 100 GB apparent, nothing allocated
    os.mkfifo(folder / "submission.csv")
    os.symlink(secret, folder / "notes.txt")
    (folder / "ok.txt").write_text("fine\n")
    tmp = tmp_path / "tmp"
    shm_before = set(os.listdir("/dev/shm"))
    result = grade("lite/wine", folder, tmp=tmp)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and len(lines) == 3, lines
    assert lines[0].startswith("mlab: error: ")
    said = "\n".join(lines)
    assert f"{folder / 'model.bin'}: {100 * 2**30} bytes" in said
    assert f"{folder / 'submission.csv'}: a FIFO" in said
    assert f"{folder / 'notes.txt'}: a link out of the submission" in said and "ok.txt" not in said
    assert os.listdir(tmp) == []  # nothing was copied anywhere
    assert not {n for n in set(os.listdir("/dev/shm")) - shm_before if n.startswith("mlab-grade-")}


def test_grade_refuses_a_fifo_given_as_the_file(tmp_path):
    fifo = tmp_path / "submission.csv"
    os.mkfifo(fifo)
    result = grade("lite/wine", fifo, tmp=tmp_path / "tmp")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [f"mlab: error: {fifo}: a FIFO; give a regular file or a folder"]


def test_a_loose_file_over_the_tasks_cap_is_refused_unread(tmp_path):
    big = tmp_path / "submission.csv"
    with open(big, "wb") as f:
        f.truncate(2**30)  # lite/wine reads at most Task.max_submission_bytes (256 MiB)
    result = grade("lite/wine", big, tmp=tmp_path / "tmp")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"mlab: error: {big}: {2**30} bytes, more than the task's {256 * 2**20}"]
    assert os.listdir(tmp_path / "tmp") == []


def test_a_killed_grade_leaves_no_scratch_copy(tmp_path):
    """kill -9 while a submission is being scored: the intake's watchdog removes the scratch copy."""
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "submission.csv").write_text("id,quality\n1,5\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\nfrom mlab.core.run.intake import taken_in\n"
                               "with taken_in(Path(sys.argv[1]), 1 << 20) as copy:\n"
                               "    print(copy, flush=True)\n    time.sleep(120)\n", str(folder)],
        stdout=subprocess.PIPE, text=True)
    copy = Path(holder.stdout.readline().strip())
    assert (copy / "submission.csv").read_text() == "id,quality\n1,5\n"
    holder.kill()
    holder.wait()
    deadline = time.monotonic() + 20
    while copy.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not copy.parent.exists()
