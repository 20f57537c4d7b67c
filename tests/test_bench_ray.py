"""`mlab bench --engine ray`: each run a Ray task, on a local Ray the command starts or on a two-node cluster that
shares no folder with the head (Ray is an optional extra)."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlab.core.errors import MlabError
from mlab.core.sandbox.rootfs import GPU_DEVICES_VAR
from tests.fixtures.bench_cli import REGISTRY, REPO, command, db_rows, env
from tests.fixtures.cli import mlab
from tests.fixtures.compute_plugins import REGISTRY as COMPUTE_REGISTRY
from tests.fixtures.compute_plugins import assert_gpus_leased_exclusively

HAVE_RAY = importlib.util.find_spec("ray") is not None


@pytest.mark.skipif(HAVE_RAY, reason="checks the message shown when Ray is not installed")
def test_ray_engine_without_ray_is_a_one_line_error(tmp_path):
    result = mlab("bench", "--tasks", "fixture/counter", "--agents", "baseline", "--engine", "ray",
                  "--bench-dir", tmp_path / "b", "--registry", REGISTRY)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["mlab: error: --engine ray needs Ray: pip install 'mlab[ray]'"]


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'mlab[ray]'); the local engine is tested")
def test_ray_engine_runs_the_same_bench(tmp_path):
    out = tmp_path / "bench"
    result = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,fixture-llm-stepper",
                  "--llm", "fixture-sleepy:0.05", "--runs", "2", "--workers", "4", "--engine", "ray",
                  "--intermediate", "--agent-option", "steps=3", "--bench-dir", out, "--registry", REGISTRY,
                  timeout=300)
    assert result.returncode == 0, result.stderr
    conn = sqlite3.connect(out / "results.db")
    rows = conn.execute(
        "SELECT agent, seed, status, final_score, prompt_tokens FROM runs ORDER BY agent, seed").fetchall()
    assert rows == [("fixture-appender", 0, "finished", 2.0, 0), ("fixture-appender", 1, "finished", 2.0, 0),
                    ("fixture-llm-stepper", 0, "finished", 2.0, 300), ("fixture-llm-stepper", 1, "finished", 2.0, 300)]
    assert conn.execute("SELECT COUNT(*) FROM step_scores").fetchone()[0] == 12
    conn.close()
    again = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,fixture-llm-stepper",
                 "--llm", "fixture-sleepy:0.05", "--runs", "2", "--engine", "ray", "--agent-option", "steps=3",
                 "--bench-dir", out, "--registry", REGISTRY, timeout=300)
    assert again.returncode == 0 and "4 already done before" in again.stdout


# ---- a shipped run folder is hostile input ----------------------------------------------------------------
def _tar(path, *members):
    """A tar built by hand: (name, kind, payload) with kind file, symlink, hardlink or dir."""
    with tarfile.open(path, "w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "dir": tarfile.DIRTYPE,
                         "device": tarfile.CHRTYPE}[kind]
            info.linkname = payload.decode() if payload else ""
            tar.addfile(info)
    return path


def test_extract_keeps_everything_inside_the_run_folder(tmp_path):
    from mlab.core.bench.ray_engine import extract

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("head's own file")
    archive = _tar(tmp_path / "a.tar",
                   ("run/trace.json", "file", b"{}"),
                   ("run/workspace/ok-link", "symlink", b"../trace.json"),
                   ("/etc/evil", "file", b"absolute"),
                   ("run/../../escaped", "file", b"dot-dot"),
                   ("run/workspace/etc", "symlink", b"/etc"),
                   ("run/workspace/up", "symlink", b"../../../outside"),
                   ("run/workspace/up/secret", "file", b"overwritten through a link"),
                   ("run/workspace/hard", "hardlink", str(outside / "secret").encode()),
                   ("run/workspace/null", "device", b""))
    dest = tmp_path / "dest"
    refused = extract(archive, dest)
    assert (dest / "run" / "trace.json").read_text() == "{}"
    assert os.readlink(dest / "run" / "workspace" / "ok-link") == "../trace.json"
    assert (outside / "secret").read_text() == "head's own file"
    assert not (tmp_path / "escaped").exists() and not (dest.parent / "escaped").exists()
    for name in ("etc", "hard", "null"):
        assert not os.path.lexists(dest / "run" / "workspace" / name)
    # the link was refused, so the file below it landed in a real folder inside dest
    assert not os.path.islink(dest / "run" / "workspace" / "up")
    assert (dest / "run" / "workspace" / "up" / "secret").read_text() == "overwritten through a link"
    # a leading slash is dropped (the file lands inside dest); every other escape is refused and named
    assert (dest / "etc" / "evil").read_text() == "absolute"
    assert [line.split(":")[0] for line in refused] == [
        "'run/../../escaped'", "'run/workspace/etc'", "'run/workspace/up'", "'run/workspace/hard'",
        "'run/workspace/null'"]
    # nothing was written anywhere but below dest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar", "dest", "outside"]
    assert [p.name for p in outside.iterdir()] == ["secret"]


def test_extract_refuses_an_archive_over_the_limit(tmp_path):
    from mlab.core.bench.ray_engine import extract

    archive = _tar(tmp_path / "big.tar", ("run/a", "file", b"x" * 600), ("run/b", "file", b"y" * 600))
    with pytest.raises(MlabError, match="over the limit"):
        extract(archive, tmp_path / "dest", max_bytes=1000)


def test_a_task_reaches_a_node_once_and_whole(tmp_path):
    """A node's copy of a task comes from the head's archive, checked by sha256 and installed once."""
    from mlab.core.bench.ray_engine import SHIPPED_FILE, chunks, install_task, pack_task
    from mlab.core.run.taskdata import TaskHome

    head = TaskHome(tmp_path / "head")
    task_dir = head.data_root / "pack__t"
    (task_dir / "public").mkdir(parents=True)
    (task_dir / "hidden").mkdir()
    (task_dir / "public" / "train.csv").write_text("a,b\n1,2\n")
    (task_dir / "hidden" / "answers.csv").write_text("b\n3\n")
    (task_dir / "prepared.json").write_text("{}")
    sha, archive = pack_task(head, "pack/t", tmp_path / "cache")
    again, _ = pack_task(head, "pack/t", tmp_path / "cache")
    assert again == sha and json.loads((task_dir / SHIPPED_FILE).read_text()) == {"sha256": sha}
    store = dict(enumerate(chunks(archive)))
    fetched: list[int] = []

    def fetch(ref: int) -> bytes:
        fetched.append(ref)
        return store[ref]

    shipment = {"task": "pack/t", "dir": "pack__t", "sha256": sha, "refs": list(store)}
    node = TaskHome(tmp_path / "node")
    install_task(node, shipment, fetch)
    assert (node.hidden_dir(SimpleNamespace(name="pack/t")) / "answers.csv").read_text() == "b\n3\n"
    assert node.is_prepared(SimpleNamespace(name="pack/t"))
    install_task(node, shipment, fetch)  # already there: nothing fetched
    install_task(head, shipment, fetch)  # the head's own home (a local Ray): taken as it is
    assert fetched == list(store)
    with pytest.raises(MlabError, match="damaged"):
        install_task(TaskHome(tmp_path / "other"), {**shipment, "sha256": "0" * 64}, fetch)
    assert not (tmp_path / "other" / "tasks" / "pack__t").exists()


def test_large_task_files_stay_home_and_the_head_links_its_own(tmp_path):
    """A workspace's hard links to the node's copy of the task's read-only files are named, not sent; the head
    links the same files from its own copy, and the names from the worker are not what it goes by."""
    from mlab.core.bench.ray_engine import LOG_MEMBER, RUN_MEMBER, SHARED_MEMBER, extract, link_shared, pack_run

    big = os.urandom(3 << 20)
    node_public, head_public = tmp_path / "node" / "public", tmp_path / "head" / "public"
    for public in (node_public, head_public):
        (public / "data").mkdir(parents=True)
        (public / "data" / "train.bin").write_bytes(big)
    (tmp_path / "secret").write_text("not the agent's")
    space = tmp_path / "space"
    workspace = space / RUN_MEMBER / "workspace"
    (workspace / "data").mkdir(parents=True)
    os.link(node_public / "data" / "train.bin", workspace / "data" / "train.bin")
    (workspace / "train.py").write_text("print('hi')\n")
    (space / LOG_MEMBER).write_text("worker output\n")
    archive = tmp_path / "run.tar"
    pack_run(archive, space / RUN_MEMBER, node_public, space / LOG_MEMBER, ["data/*"])
    assert archive.stat().st_size < 100_000  # the 3 MiB file stayed on the node
    staging = tmp_path / "staging"
    assert extract(archive, staging) == []
    names = json.loads((staging / SHARED_MEMBER).read_text())
    assert names == ["data/train.bin"]
    (staging / SHARED_MEMBER).write_text(json.dumps(names + ["../../../secret", "/etc/passwd", "train.py"]))
    link_shared(staging, head_public, ["data/*"])
    arrived = staging / RUN_MEMBER / "workspace"
    assert (arrived / "data" / "train.bin").read_bytes() == big
    assert (arrived / "data" / "train.bin").stat().st_ino == (head_public / "data" / "train.bin").stat().st_ino
    assert (arrived / "train.py").read_text() == "print('hi')\n"
    assert sorted(p.name for p in arrived.iterdir()) == ["data", "train.py"]
    assert (staging / LOG_MEMBER).read_text() == "worker output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head", "node", "run.tar", "secret", "space", "staging"]


# ---- a real two-node cluster on this machine ---------------------------------------------------------------
RAY = Path(sys.executable).with_name("ray")
_NODES = """
import json, sys, time, ray
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) >= int(sys.argv[3]):
        print(json.dumps(sorted(n["NodeID"] for n in nodes)))
        break
    time.sleep(0.5)
"""


def _free_ports(count: int) -> list[int]:
    """`count` distinct free ports: every socket stays bound until all are picked (one at a time, the kernel can
    hand the same just-closed port out twice, and Ray refuses two components on one port)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


_NODE_PORT_OPTIONS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
                      "--metrics-export-port", "--node-manager-port", "--object-manager-port")


@contextlib.contextmanager
def _ray_cluster(tmp_path: Path, nodes_args: dict[str, list[str]], extra_env: dict[str, str] | None = None):
    """Ray nodes on this machine (the first one the head, given its own options), each with its own temp root,
    TMPDIR and MLAB_HOME (nothing shared but the machine). Each node is a `ray start --block` in a session of its
    own; at the end every process of those sessions is stopped, whatever happened (never `ray stop`, which would
    stop other Ray clusters here too). Yields (address, node ids, node name -> its root)."""
    nodes: dict[str, Path] = {}
    procs: list[subprocess.Popen] = []
    # every port fixed and distinct: Ray's own random picks landed on one of ours once (CI, stop 48)
    free = iter(_free_ports(1 + len(nodes_args) * len(_NODE_PORT_OPTIONS)))
    port = next(free)
    address = f"127.0.0.1:{port}"

    def start(name: str, *args: str) -> None:
        root = Path(tempfile.mkdtemp(prefix=f"mray{name}", dir="/tmp"))  # Ray's socket paths must stay short
        nodes[name] = root
        (root / "tmp").mkdir()
        env = {**os.environ, "TMPDIR": str(root / "tmp"), "MLAB_HOME": str(root / "home"),
               "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO), **(extra_env or {})}
        ports = [arg for option in _NODE_PORT_OPTIONS for arg in (option, str(next(free)))]
        log = open(tmp_path / f"ray-{name}.log", "wb")
        cpus = [] if "--num-cpus" in args else ["--num-cpus", "1"]
        procs.append(subprocess.Popen(
            [str(RAY), "start", "--block", *cpus, "--temp-dir", str(root / "ray"),
             "--disable-usage-stats", *ports, *args],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=root))

    def stop() -> None:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_session_alive(p.pid) for p in procs):
            time.sleep(0.2)
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for root in nodes.values():
            shutil.rmtree(root, ignore_errors=True)

    try:
        for index, (name, args) in enumerate(nodes_args.items()):
            if index == 0:
                start(name, "--head", "--port", str(port), "--include-dashboard", "false", *args)
            else:
                start(name, "--address", address, *args)
        probe = subprocess.Popen([sys.executable, "-c", _NODES, address, "240", str(len(nodes_args))],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "RAY_AUTH_MODE": "disabled"})
        deadline = time.monotonic() + 300
        while probe.poll() is None and all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        if probe.poll() is None:
            probe.kill()
        found, errors = probe.communicate()
        if not found.strip():
            logs = "\n".join((tmp_path / f"ray-{n}.log").read_text(errors="replace")[-2000:] for n in nodes)
            pytest.fail(f"the Ray cluster did not come up:\n{errors[-3000:]}\n{logs}")
        yield address, json.loads(found), nodes
    finally:
        stop()


@pytest.fixture(scope="module")
def two_node_cluster(tmp_path_factory):
    """A Ray head and a second node of one CPU each."""
    with _ray_cluster(tmp_path_factory.mktemp("ray-cluster"), {"a": [], "b": []}) as cluster:
        yield cluster


def _session_alive(sid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # the session id; a zombie (the unreaped `ray start` itself) has ended: waiting on it took the whole 60 s
            if int(fields[3]) == sid and fields[0] != "Z":
                return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'mlab[ray]')")
def test_runs_spread_over_two_nodes_come_back_whole_to_the_head(tmp_path, two_node_cluster):
    address, node_ids, nodes = two_node_cluster
    home = tmp_path / "head-home"  # the head's MLAB_HOME: no node sees it
    out = tmp_path / "bench"
    args = ["bench", "--tasks", "lite/wine,lite/diabetes", "--agents", "baseline", "--runs", "2", "--workers", "2",
            "--engine", "ray", "--ray-address", address, "--cpus-per-run", "1", "--intermediate",
            "--bench-dir", str(out)]
    extra = {"MLAB_HOME": str(home), "RAY_AUTH_MODE": "disabled", "MLAB_LOAD_PLUGINS": "local,bwrap,lite,baseline"}
    result = mlab(*args, timeout=900, env=extra)
    assert result.returncode == 0, result.stdout + result.stderr
    conn = sqlite3.connect(out / "results.db")
    rows = conn.execute("SELECT key, run_dir, status, final_score FROM runs ORDER BY key").fetchall()
    step_scores = conn.execute("SELECT COUNT(*) FROM step_scores").fetchone()[0]
    conn.close()
    assert len(rows) == 4 and all(status == "finished" and score is not None for _, _, status, score in rows), rows
    assert step_scores >= 4

    placements = [json.loads(line) for line in (out / "logs" / "ray_runs.jsonl").read_text().splitlines()]
    assert sorted(p["key"] for p in placements) == [key for key, *_ in rows]
    assert {p["node_id"] for p in placements} == set(node_ids)  # both nodes ran runs
    temps = {p["temp"] for p in placements}
    assert temps == {str(nodes["a"] / "tmp"), str(nodes["b"] / "tmp")}
    for name in ("a", "b"):  # each node got the tasks it ran through the object store, into its own home
        assert list((nodes[name] / "home" / "tasks").glob("lite__*/shipped.json"))

    for _key, run_dir, _, score in rows:
        run = out / run_dir
        trace = json.loads((run / "trace.json").read_text())
        assert trace["status"] == "finished" and trace["final_score"] == score
        assert (run / "snapshots" / "final.json").is_file() and (run / "snapshots" / "step_0000.json").is_file()
        assert (run / "workspace" / "submission.csv").is_file()
    # the head rescoring every run from its final snapshot (every object must have arrived) gives the same scores
    evaluated = mlab("eval", "--json", *[str(out / run_dir) for _, run_dir, _, _ in rows], timeout=600,
                     env=extra)
    assert evaluated.returncode == 0, evaluated.stderr
    scores = json.loads(evaluated.stdout)
    assert [s["error"] for s in scores] == [None] * 4
    assert sorted(s["score"] for s in scores) == sorted(score for *_, score in rows)
    assert not list((out / ".ray" / "incoming").iterdir())
    assert not [p for p in (out / "runs").iterdir() if p.name.startswith(".")]


def _progress_steps(out: Path) -> dict[str, int]:
    """What the head knows of each run under way: the progress its node reported (through the driver)."""
    steps = {}
    for path in (out / ".progress").glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            steps[path.stem] = json.loads(path.read_text())["step"]
    return steps


def _rows(out: Path) -> list[dict]:
    return db_rows(out, "SELECT * FROM runs ORDER BY key")


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'mlab[ray]')")
def test_ctrl_c_brings_runs_back_resumable_and_a_rerun_resumes_them_on_the_cluster(tmp_path, two_node_cluster):
    address, _node_ids, _nodes = two_node_cluster
    out = tmp_path / "bench"
    extra = {"MLAB_HOME": str(tmp_path / "head-home"), "RAY_AUTH_MODE": "disabled"}
    args = ("bench", "--tasks", "fixture/counter", "--agents", "fixture-stepper", "--runs", "2", "--workers", "2",
            "--engine", "ray", "--ray-address", address, "--cpus-per-run", "1", "--agent-option", "steps=8",
            # a second a step: both runs are still under way when the SIGINT lands, even on a loaded machine
            "--agent-option", "sleep=1.0", "--bench-dir", str(out), "--registry", REGISTRY)
    proc = subprocess.Popen(command(*args), cwd=REPO, env=env(**extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while not (len(steps := _progress_steps(out)) == 2 and all(1 <= s <= 4 for s in steps.values())):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            stdout, stderr = proc.communicate()
            pytest.fail(f"both runs never reported a step under way: {steps}\n{stdout}\n{stderr}")
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stdout + stderr
    rows = _rows(out)
    assert [r["status"] for r in rows] == ["interrupted", "interrupted"], rows
    for r in rows:  # the head had no folder for these runs: each came back from its node when stopped
        trace = json.loads((out / r["run_dir"] / "trace.json").read_text())
        assert trace["status"] == "running" and 1 <= len(trace["steps"]) < 8
    shipped = [json.loads(line) for line in (out / "logs" / "ray_runs.jsonl").read_text().splitlines()]
    assert sorted(p["status"] for p in shipped) == ["interrupted", "interrupted"]

    resumed = mlab(*args, timeout=600, env=extra)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    for r in _rows(out):
        trace = json.loads((out / r["run_dir"] / "trace.json").read_text())
        assert r["status"] == "finished" and [s["index"] for s in trace["steps"]] == list(range(1, 9))
        executed = sum(s["action"]["name"] == "Execute Script" for s in trace["steps"])
        log = (out / r["run_dir"] / "workspace" / "log.txt").read_text().splitlines()
        assert log == [f"run {i}" for i in range(executed)]  # every step's effect exactly once
        assert r["final_score"] == executed and r["attempts"] == 1
    modes = [json.loads(line)["mode"] for line in (out / "logs" / "ray_runs.jsonl").read_text().splitlines()]
    assert modes == ["start", "start", "resume", "resume"]


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install 'mlab[ray]')")
def test_ray_leases_each_run_a_gpu_of_its_node_by_num_gpus(tmp_path, stand_in_gpus):
    """A real Ray node with two GPUs (stand-in device nodes: Ray counts what `--num-gpus` says): three runs of one
    GPU each, three workers; Ray runs two at once, each with a GPU of its own (ray.get_gpu_ids), which the run's
    sandbox alone shows and CUDA_VISIBLE_DEVICES names; the third waits until one is given back."""
    devices = {GPU_DEVICES_VAR: ":".join(stand_in_gpus)}
    with _ray_cluster(tmp_path, {"g": ["--num-cpus", "3", "--num-gpus", "2"]}, devices) as (address, _ids, _roots):
        out = tmp_path / "bench"
        extra = {"MLAB_HOME": str(tmp_path / "head-home"), "RAY_AUTH_MODE": "disabled"}
        args = ["bench", "--tasks", "fixture/counter", "--agents", "fixture-compute-probe", "--registry",
                COMPUTE_REGISTRY, "--engine", "ray", "--ray-address", address, "--cpus-per-run", "1"]
        result = mlab(*args, "--runs", "3", "--workers", "3", "--gpus-per-run", "1", "--agent-option",
                      f"paths={json.dumps(stand_in_gpus)}", "--agent-option", "hold=2", "--bench-dir", str(out),
                      timeout=900, env=extra)
        assert result.returncode == 0, result.stdout + result.stderr
        too_many = mlab(*args, "--gpus-per-run", "3", "--bench-dir", str(tmp_path / "refused"), timeout=300,
                        env=extra)
    assert too_many.returncode == 2, too_many.stderr
    assert too_many.stderr.strip().splitlines()[-1] == "mlab: error: --gpus-per-run 3: the Ray cluster has 2 GPUs"
    found = [json.loads((out / row["run_dir"] / "trace.json").read_text()) for row in _rows(out)]
    assert [trace["status"] for trace in found] == ["finished"] * 3
    assert_gpus_leased_exclusively(found, stand_in_gpus)
