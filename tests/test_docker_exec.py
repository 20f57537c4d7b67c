"""The docker sandbox keeps one container per plan and `docker exec`s each script into it: what one command
leaves (processes, /tmp, /dev/shm, IPC objects) is gone when the next starts, a timeout kills only the command,
a changed plan gets a new container, and the kept containers go with close() and with a killed harness.

Containers are told apart through the engine (`docker ps` with the harness's label), not the sandbox's own
bookkeeping. Skipped with the reason where the docker sandbox cannot run (failed under CI=true, as in
test_sandbox.py).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.test_sandbox import TRAIN, make_env, make_sandbox, marked_processes, run, wait_gone


def _engine():
    from mlab_sandbox_docker import engine

    return engine


def containers(label: str | None = None) -> set[str]:
    """Names of the containers (running or not) carrying label (by default this process's harness label)."""
    engine = _engine()
    label = label or engine.harness_label()
    result = engine.cli("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}")
    assert result is not None and result.returncode == 0, result
    return set(result.stdout.decode().split())


def wait_removed(names: set[str], seconds: float) -> set[str]:
    """Those of names the engine still has after seconds (removal may run in the background)."""
    engine = _engine()
    deadline = time.monotonic() + seconds
    while True:
        left = {name for name in names if engine.inspect(name) is not None}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


@pytest.fixture
def docker_sandbox():
    """The docker sandbox, or a skip (a failure under CI) where it cannot run. A case that asks for it starts
    containers: tests/conftest.py puts it in the slow tier, on the worker that holds the session's engine."""
    return make_sandbox("docker")


@pytest.fixture
def docker_env(tmp_path, docker_sandbox):
    before = containers()
    env = make_env(tmp_path, sandbox="docker")
    env.before = before
    yield env
    env.close()
    env.s.sandbox.close()


def new_containers(env) -> set[str]:
    return containers() - env.before


# /proc/1's start time tells one container from another (each has a PID namespace of its own).
INIT_STARTED = "print('init', open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])\n"


def init_of(output: str) -> str:
    return next(line.split()[1] for line in output.splitlines() if line.startswith("init "))


def test_two_commands_run_in_one_container(docker_env):
    env = docker_env
    first, err = run(env, INIT_STARTED + "import os\nprint('uid', os.getuid())\n")
    assert not err and f"uid {os.getuid()}" in first, first
    created = new_containers(env)
    assert len(created) == 1
    second, err = run(env, INIT_STARTED)
    assert not err, second
    assert init_of(first) == init_of(second)
    assert new_containers(env) == created  # no other container was made for the second command


def test_a_daemonized_process_is_gone_when_the_command_ends(docker_env):
    env = docker_env
    daemon = ("import os, sys, time, subprocess\n" + INIT_STARTED +
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              "        fd = os.open(os.devnull, os.O_RDWR)\n"
              "        for i in (0, 1, 2):\n            os.dup2(fd, i)\n"
              "        open('daemon.pid', 'w').write(str(os.getpid()))\n"
              "        time.sleep(60)\n"
              "        os._exit(0)\n"
              "    os._exit(0)\n"
              "subprocess.Popen(['nohup', 'sleep', '60'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
              "                 start_new_session=True)\n"
              "while not os.path.exists('daemon.pid'):\n    time.sleep(0.01)\n"
              "print('left behind', open('daemon.pid').read())\n")
    first, err = run(env, daemon)
    assert not err and "left behind" in first, first
    assert wait_gone(env.mark) == []  # on the host: nothing of the command runs once it has ended
    pid = (env.workspace / "daemon.pid").read_text()
    second, err = run(env, INIT_STARTED + "import os\n"
                           f"print('daemon there', os.path.exists('/proc/{pid}'))\n"
                           "mine = [p for p in os.listdir('/proc') if p.isdigit() and os.stat('/proc/' + p).st_uid"
                           " == os.getuid()]\n"
                           "print('own processes', len(mine))\n")
    assert not err, second
    assert init_of(first) == init_of(second)  # the same container: the same PID namespace
    assert "daemon there False" in second
    # The script and the shell that runs it (ps would count itself too).
    assert "own processes 2" in second, second


def test_tmp_shm_dev_and_ipc_are_fresh_for_each_command(docker_env):
    env = docker_env
    leave = (INIT_STARTED + "import os, subprocess\n"
             "open('/tmp/left.txt', 'w').write('x')\n"
             "os.makedirs('/tmp/deep/a/b/c')\n"
             "open('/tmp/deep/a/b/c/f', 'w').write('x')\n"
             "for p in ('/tmp/deep/a/b/c', '/tmp/deep/a/b', '/tmp/deep/a', '/tmp/deep'):\n"
             "    os.chmod(p, 0)\n"
             "os.symlink('/etc', '/tmp/link')\n"
             "open('/dev/shm/segment', 'w').write('x')\n"
             "try:\n    open('/dev/made-here', 'w').write('x')\nexcept OSError:\n    pass\n"
             "print('ipc', subprocess.run(['ipcmk', '-M', '4096'], capture_output=True).returncode)\n"
             "print('tmp', sorted(os.listdir('/tmp')))\n")
    first, err = run(env, leave)
    assert not err and "tmp [" in first and "'left.txt'" in first, first
    look = (INIT_STARTED + "import os, sys\n"
            # the folders that lead to the workspace, the home and the Python environment (mounted below /tmp
            # when the tests run there: a checkout under /tmp)
            "keep = set()\n"
            "for p in (os.getcwd(), os.environ['HOME'], sys.prefix, sys.base_prefix, sys.exec_prefix):\n"
            "    while p != '/':\n        keep.add(p)\n        p = os.path.dirname(p)\n"
            "left = []\n"
            "for top in ('/tmp', '/dev/shm', '/dev/mqueue'):\n"
            "    for folder, dirs, files in os.walk(top):\n"
            "        left += [os.path.join(folder, n) for n in files]\n"
            "        for n in list(dirs):\n"
            "            path = os.path.join(folder, n)\n"
            "            if os.path.islink(path) or os.path.ismount(path):\n                dirs.remove(n)\n"
            "            if path not in keep:\n                left.append(path)\n"
            "print('left', left)\n"
            "print('dev', os.path.exists('/dev/made-here'))\n"
            "print('shm', open('/proc/sysvipc/shm').read().splitlines()[1:])\n")
    second, err = run(env, look)
    assert not err, second
    assert init_of(first) == init_of(second)
    assert "left []" in second and "dev False" in second and "shm []" in second, second


@pytest.mark.timeout(60)
def test_a_timeout_kills_the_command_and_the_container_runs_the_next(tmp_path, docker_sandbox):
    env = make_env(tmp_path, timeout=2.0, sandbox="docker")
    try:
        before = containers()
        spin = (INIT_STARTED + "import subprocess\n"
                "subprocess.Popen(['sleep', '60'])\n"
                "print('spinning', flush=True)\n"
                "while True:\n    pass\n")
        first, err = run(env, spin)
        assert err and "time limit of 2 s" in first and "spinning" in first, first
        assert "Killed" not in first  # the command's shell did not live to report its child's death
        assert wait_gone(env.mark) == []
        second, err = run(env, INIT_STARTED + "print('next ran')\n")
        assert not err and "next ran" in second, second
        assert init_of(first) == init_of(second)
        assert len(containers() - before) == 1
    finally:
        env.close()
        env.s.sandbox.close()


def test_exit_codes_and_a_signal_in_a_kept_container(docker_env):
    env = docker_env
    obs, err = run(env, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(7)\n")
    assert err and obs.endswith("[exit code 7]") and "out\nerr" in obs, obs
    obs, err = run(env, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    assert err and f"[exit code -{signal.SIGTERM.value}]" in obs, obs
    assert len(new_containers(env)) == 1


def test_close_removes_the_kept_container(tmp_path, docker_sandbox):
    before = containers()
    env = make_env(tmp_path, sandbox="docker")
    obs, err = run(env, "print('ran')\n")
    assert not err and "ran" in obs
    created = containers() - before
    assert len(created) == 1
    env.close()
    env.s.sandbox.close()
    assert wait_removed(created, 0) == set()  # close() waits for the engine
    obs, err = run(env, "print('again')\n")  # a later command starts afresh
    assert not err and "again" in obs
    env.s.sandbox.close()


def test_a_replaced_read_only_file_gets_a_new_container(docker_env):
    """The kernel drops a container's read-only mount of a file replaced on the host: the next command must not
    see the new file writable through the workspace, so it runs in a container mounted afresh."""
    env = docker_env
    first, err = run(env, INIT_STARTED)
    assert not err, first
    train = env.workspace / "data" / "train.csv"
    train.unlink()
    train.write_text(TRAIN)
    second, err = run(env, INIT_STARTED + "try:\n    open('data/train.csv', 'w').write('hacked')\n    print('WROTE')\n"
                                          "except OSError as exc:\n    print('refused', exc.strerror)\n")
    assert not err and "refused Read-only file system" in second, second
    assert init_of(first) != init_of(second)
    assert train.read_text() == TRAIN


HARNESS = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_sandbox import make_env, run
from mlab_sandbox_docker import engine
env = make_env(Path({tmp!r}), timeout=60, sandbox="docker")
env.s.extra_env["MLAB_TEST_MARK"] = {mark!r}
run(env, "import subprocess\\nsubprocess.Popen(['sleep', '60'], start_new_session=True)\\n")
Path({label_file!r}).write_text(engine.harness_label())
time.sleep(60)
"""


@pytest.mark.timeout(90)
def test_a_killed_harness_takes_its_kept_container_with_it(tmp_path, docker_sandbox):
    mark = uuid.uuid4().hex
    label_file = tmp_path / "label.txt"
    code = HARNESS.format(tests=str(Path(__file__).parent), tmp=str(tmp_path), mark=mark,
                          label_file=str(label_file))
    harness = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not label_file.exists() and harness.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert label_file.exists(), harness.poll()
        kept = containers(label_file.read_text())
        assert len(kept) == 1  # idle between commands, its command's processes gone
        assert marked_processes(mark) == []
    finally:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
    assert wait_removed(kept, 20) == set()


def test_plan_key_changes_with_what_a_container_is_made_of(tmp_path):
    """Work in the workspace keeps a command's plan (and its container); the network setting, a limit or a
    replaced read-only file does not."""
    from mlab.core import ExecSpec, Limits
    from mlab_sandbox_docker.sandbox import plan_of

    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "train.csv").write_text(TRAIN)
    spec = ExecSpec(cwd=ws, env={"PATH": os.environ["PATH"]}, limits=Limits(memory_bytes=2**30),
                    read_only_paths=[ws / "data" / "train.csv"])
    argv = [sys.executable, "-u", "x.py"]
    key = plan_of(argv, spec)[0]
    (ws / "x.py").write_text("print(1)\n")
    (ws / "sub").mkdir()
    assert plan_of(argv, spec)[0] == key
    assert plan_of(argv, spec.model_copy(update={"network": True}))[0] != key
    assert plan_of(argv, spec.model_copy(update={"limits": Limits(memory_bytes=2**31)}))[0] != key
    (ws / "data" / "train.csv").unlink()
    (ws / "data" / "train.csv").write_text(TRAIN)
    replaced = plan_of(argv, spec)[0]
    assert replaced != key
    # A file replaced under a reused inode number is told apart by its change time, which any change moves on.
    os.chmod(ws / "data" / "train.csv", 0o644)
    assert plan_of(argv, spec)[0] != replaced


def test_swap_is_bounded_only_where_the_engine_can_bound_it(tmp_path, monkeypatch):
    """An engine that cannot bound swap (cgroup v2 with dockerd in the root cgroup, v1 without swapaccount=1)
    ignores --memory-swap and prints a warning on the client's stderr, which is the command's output: the agent
    read it in every REPL command (`make cgroup2-check`'s hostile cases on docker). Memory is bounded either way."""
    from mlab.core import ExecSpec, Limits
    from mlab_sandbox_docker import engine
    from mlab_sandbox_docker.sandbox import command_for

    spec = ExecSpec(cwd=tmp_path, env={"PATH": os.environ["PATH"]}, limits=Limits(memory_bytes=2**30))
    argv = [sys.executable, "-u", "x.py"]
    for can in (True, False):
        monkeypatch.setattr(engine, "swap_limit", lambda key, can=can: can)
        line = command_for(argv, spec, "mlab-test")
        assert line[line.index("--memory") + 1] == str(2**30)
        assert ("--memory-swap" in line) is can


def test_the_engines_swap_limit_is_what_docker_info_says(docker_sandbox):
    engine = _engine()
    said = engine.cli("info", "--format", "{{.SwapLimit}}")
    assert said is not None and said.returncode == 0, said
    engine.swap_limit.cache_clear()
    assert engine.swap_limit(engine.engine_key()) is (said.stdout.decode().strip() == "true")


WARNING = "WARNING: Your kernel does not support swap limit capabilities or the cgroup is not mounted."


def test_what_the_engine_warns_of_when_making_a_container_is_not_the_commands_output(tmp_path, docker_sandbox,
                                                                                    monkeypatch):
    """An engine that cannot bound swap warns of it at each container it makes with a memory bound, on the
    client's stderr (on cgroup v2 with the daemon in the root cgroup, and v1 without swapaccount=1: the REPL's
    every answer began with it in `make cgroup2-check`). Here the real client, behind one that warns as such an
    engine does, runs a command with a container of its own (the REPL's path: its stdin a pipe)."""
    from mlab.core import ExecSpec, Limits
    from mlab_sandbox_docker import engine

    real = engine.docker_exe()
    warning = tmp_path / "bin" / "docker"
    warning.parent.mkdir()
    warning.write_text(f"#!/bin/sh\ncase $1 in run|create) echo '{WARNING}' >&2;; esac\nexec {real} \"$@\"\n")
    warning.chmod(0o755)
    monkeypatch.setattr(engine, "docker_exe", lambda: str(warning))
    ws = tmp_path / "ws"
    ws.mkdir()
    spec = ExecSpec(cwd=ws, env={"PATH": os.environ["PATH"]}, limits=Limits(memory_bytes=2**30, timeout_s=60),
                    stdin_pipe=True)
    command = docker_sandbox.popen([sys.executable, "-c", "import sys; print('read', sys.stdin.read())"], spec)
    try:
        command.stdin.write(b"four\n")
        command.stdin.close()
        output = command.stdout.read()
        assert command.wait(timeout=60) == 0
    finally:
        docker_sandbox.release(command)
        docker_sandbox.close()
    assert output.decode() == "read four\n\n", output
