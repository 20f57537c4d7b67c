"""Scripts and the Python REPL in every sandbox: confinement, limits, and the processes they leave.

Sandboxes by name: "local" (namespaces where the kernel allows; commands forked by the run's zygote),
"local-fresh" (the same with a root built for each command, as where no zygote can be had; the `env` cases),
"fallback" (the local sandbox without namespaces), and every other registered sandbox that confines ("bwrap" and
"docker" here; tests/fixtures/sandboxes.py; skipped with the reason when not usable here). The docker cases run
against a Docker engine the session starts for itself (tests/fixtures/docker_engine.py); under CI=true an engine
that cannot be had fails them instead, so that a silent skip cannot pass CI.
"""
from __future__ import annotations

import glob
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from mlab.core.models import Action
from mlab.core.plugins.registry import load_registry
from mlab.core.run.environment import Environment, EnvSettings
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox, namespace_prefix
from mlab.core.sandbox.spec import ExecSpec
from tests.fixtures.sandboxes import CONFINING, REGISTERED, make_sandbox

SECRET = "SECRET-ANSWER-42"
TRAIN = "id,label\n1,0\n2,1\n"
API_KEY = "sk-test-do-not-leak-123"

confined = pytest.mark.skipif(namespace_prefix() is None, reason="needs mount/PID namespaces (unshare)")

CONFINED = CONFINING  # sandboxes that hide, protect and clean up by construction: every registered one that does
EVERY = CONFINED + ["fallback"]


@pytest.mark.parametrize("name", REGISTERED)
def test_a_sandbox_that_takes_part_in_auto_confines_wherever_it_is_available(name):
    cls = load_registry().items["sandboxes"][name]
    if cls.auto_rank is None:
        pytest.skip(f"{name} is chosen by name only")
    if not cls.available()[0]:
        pytest.skip(f"{name} is not available here")
    assert cls().confined, f"{name} has auto_rank {cls.auto_rank} but does not confine: auto could pick it"


def make_env(tmp_path: Path, timeout=10.0, namespaces=True, pristine=True, output_bytes=1_000_000,
             sandbox: str | None = None, python: str = sys.executable, **limits):
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "train.csv").write_text(TRAIN)
    taskdata = tmp_path / "taskdata"
    (taskdata / "hidden").mkdir(parents=True)
    (taskdata / "hidden" / "answers.csv").write_text(SECRET + "\n")
    shutil.copytree(ws, taskdata / "public")
    mark = uuid.uuid4().hex
    box = make_sandbox(sandbox) if sandbox else LocalSandbox(namespaces=namespaces)
    env = Environment(EnvSettings(
        workspace=ws, read_only_patterns=["data/*"], sandbox=box,
        store=SnapshotStore(tmp_path / "store"), pristine_dir=taskdata / "public" if pristine else None,
        hidden_paths=[taskdata], sandbox_home=tmp_path / "home",
        limits=Limits(timeout_s=timeout, output_bytes=output_bytes, **limits), extra_env={"MLAB_TEST_MARK": mark},
        python=python))
    env.mark = mark
    return env


@pytest.fixture(params=[*CONFINED, "local-fresh"])
def env(request, tmp_path):
    environment = make_env(tmp_path, sandbox=request.param)
    yield environment
    environment.close()


@pytest.fixture(params=EVERY)
def any_env(request, tmp_path):
    environment = make_env(tmp_path, sandbox=request.param)
    yield environment
    environment.close()


def act(env, name, **args):
    return env.execute(Action(name=name, args=args))


def run(env, code: str, name="script.py"):
    (env.workspace / name).write_text(code)
    return act(env, "Execute Script", script_name=name)


def alive(pid: int) -> bool:
    """A killed process may stay a zombie until init reaps it: that counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pid: int, seconds=15.0) -> bool:
    """A SIGKILLed process takes a moment to become a zombie (its environment is empty before that)."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def marked_processes(mark: str) -> list[int]:
    """Host pids of live processes started for this environment (they carry its mark in their environment)."""
    found = []
    for entry in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(entry, "rb") as f:
                if f"MLAB_TEST_MARK={mark}".encode() in f.read():
                    pid = int(entry.split("/")[2])
                    if alive(pid):
                        found.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return found


def wait_gone(mark: str, seconds=15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


# ---- running scripts ----------------------------------------------------------------------------

def test_execute_script_output_exit_code_cwd_and_home(any_env, tmp_path):
    env = any_env
    obs, err = run(env, "import os, sys\nprint('cwd', os.getcwd())\nprint('home', os.environ['HOME'])\n"
                        "print('to stderr', file=sys.stderr)\nsys.exit(3)\n")
    assert err  # a non-zero exit is a failed action
    assert obs.startswith("The script ran. Output:\n")
    # the agent sees workspace paths relative to the workspace (".": the working folder itself)
    assert "cwd .\n" in obs and f"home {tmp_path / 'home'}" in obs and "to stderr" in obs
    assert obs.endswith("[exit code 3]")
    (env.workspace / "pkg").mkdir()
    (env.workspace / "pkg" / "helper.py").write_text("print('in a subfolder')\n")
    assert act(env, "Execute Script", script_name="pkg/helper.py") == \
        ("The script ran. Output:\nin a subfolder\n", False)


def test_scripts_can_write_workspace_home_and_tmp(any_env, tmp_path):
    env = any_env
    obs, err = run(env, "import os, tempfile\nopen('out.csv', 'w').write('ok')\n"
                        "open(os.path.expanduser('~/cache.txt'), 'w').write('ok')\n"
                        "with tempfile.NamedTemporaryFile() as f: f.write(b'x')\n"
                        "with open('/tmp/mlab-sandbox-test-' + str(os.getpid()), 'w') as f: f.write('x')\n"
                        "os.remove('/tmp/mlab-sandbox-test-' + str(os.getpid()))\nprint('wrote')\n")
    assert not err and "wrote" in obs, obs
    assert (env.workspace / "out.csv").read_text() == "ok"
    assert (tmp_path / "home" / "cache.txt").read_text() == "ok"


def test_memory_error_text_is_not_a_limit(env):
    assert run(env, "print('caught a MemoryError earlier; File too large')\n") == \
        ("The script ran. Output:\ncaught a MemoryError earlier; File too large\n", False)


@pytest.mark.parametrize("sandbox", EVERY)
def test_huge_output_is_capped_with_a_marker(tmp_path, sandbox):
    env = make_env(tmp_path, output_bytes=100_000, sandbox=sandbox)
    obs, err = run(env, "import sys\nprint('FIRST')\nfor i in range(50_000): print('y' * 99)\nprint('LAST')\n")
    assert not err
    assert "FIRST" in obs and obs.rstrip().endswith("LAST")
    assert "bytes of output left out ...]" in obs
    assert len(obs) < 110_000


def test_non_utf8_output(env):
    obs, err = run(env, "import sys\nsys.stdout.buffer.write(b'caf\\xe9 \\xff\\xfe\\x80 end\\n')\n"
                        "sys.stdout.buffer.write('ok \u00e9'.encode('utf-8')[:-1])\n")
    assert not err and "caf\ufffd" in obs and "end" in obs
    obs.encode("utf-8")


# ---- confinement --------------------------------------------------------------------------------

def test_script_cannot_modify_read_only_files(env):
    obs, err = run(env, "import os\n"
                        "for how in ('data/train.csv', os.path.abspath('data/train.csv')):\n"
                        "    try:\n        open(how, 'w').write('hacked')\n        print('WROTE', how)\n"
                        "    except OSError as e:\n        print('refused', e.strerror)\n"
                        "try:\n    os.remove('data/train.csv')\n    print('REMOVED')\n"
                        "except OSError as e:\n    print('refused', e.strerror)\n"
                        "import subprocess\n"
                        "for cmd in (['mount', '-o', 'remount,bind,rw', 'data/train.csv'],\n"
                        "            ['umount', 'data/train.csv']):\n"
                        "    print('mount rc', subprocess.run(cmd, capture_output=True).returncode)\n"
                        "try:\n    open('data/train.csv', 'w').write('hacked')\n    print('WROTE after mount')\n"
                        "except OSError as e:\n    print('refused', e.strerror)\n")
    assert not err
    assert "WROTE" not in obs and "REMOVED" not in obs
    assert obs.count("refused Read-only file system") == 3 and obs.count("refused") == 4, obs
    assert "mount rc 0" not in obs
    assert "read-only files were changed" not in obs
    assert (env.workspace / "data" / "train.csv").read_text() == TRAIN


def test_folder_swap_around_read_only_files_is_undone(env):
    obs, err = run(env, "import os\nos.rename('data', 'data_old')\nos.mkdir('data')\n"
                        "open('data/train.csv', 'w').write('hacked')\nprint('swapped')\n")
    assert not err and "swapped" in obs
    assert "[read-only files were changed and have been restored: data/train.csv]" in obs
    assert (env.workspace / "data" / "train.csv").read_text() == TRAIN


@pytest.mark.parametrize("sandbox,pattern", [*((name, "data/*") for name in CONFINED),
                                             ("fallback", "data/*"), ("fallback", "data")])
def test_read_only_folder_swapped_for_a_symlink_out_is_restored_safely(tmp_path, sandbox, pattern):
    env = make_env(tmp_path, sandbox=sandbox)
    env.s.read_only_patterns = [pattern]
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "train.csv").write_text("victim\n")
    obs, err = run(env, f"import os\nos.rename('data', 'd2')\nos.symlink({str(tmp_path / 'victim')!r}, 'data')\n"
                        "print('linked')\n")
    assert not err and "linked" in obs and "have been restored" in obs, obs
    assert (tmp_path / "victim" / "train.csv").read_text() == "victim\n"  # not deleted through the link
    assert not os.path.islink(env.workspace / "data")
    assert (env.workspace / "data" / "train.csv").read_text() == TRAIN


def test_fallback_without_namespaces_restores_and_reports(tmp_path):
    env = make_env(tmp_path / "a", namespaces=False)
    obs, err = run(env, "open('data/train.csv', 'w').write('hacked')\nopen('data/extra.csv', 'w').write('x')\n")
    assert not err
    # a changed file is restored; a new entry is removed, and the note says which (issue 31 item 13)
    assert "[read-only files were changed and have been restored: data/train.csv]" in obs
    assert "[entries added under read-only folders have been removed: data/extra.csv]" in obs
    assert (env.workspace / "data" / "train.csv").read_text() == TRAIN
    assert not (env.workspace / "data" / "extra.csv").exists()
    # The REPL is checked the same way.
    obs, err = act(env, "Python REPL", command="open('data/train.csv', 'a').write('more')")
    assert not err and "have been restored: data/train.csv" in obs
    assert (env.workspace / "data" / "train.csv").read_text() == TRAIN
    env.close()
    # With nothing to restore from, the change is still reported.
    env = make_env(tmp_path / "b", namespaces=False, pristine=False)
    obs, err = run(env, "open('data/train.csv', 'w').write('hacked')\n")
    assert not err and "[read-only files were changed and could not be restored: data/train.csv]" in obs


def test_script_cannot_read_hidden_answers(env, tmp_path):
    answers = tmp_path / "taskdata" / "hidden" / "answers.csv"
    # Raw disks would give the answers away too (e.g. debugfs on the block device).
    disks = [p for p in glob.glob("/dev/*") if stat.S_ISBLK(os.stat(p).st_mode)][:5]
    obs, err = run(env, "import os, subprocess\n"
                        f"for p in ({str(answers)!r}, {str(answers.parent)!r}):\n"
                        "    try:\n        print('GOT', open(p).read() if os.path.isfile(p) else os.listdir(p))\n"
                        "    except OSError as e:\n        print('refused', e.strerror)\n"
                        f"print('umount rc', subprocess.run(['umount', {str(tmp_path / 'taskdata')!r}],"
                        " capture_output=True).returncode)\n"
                        f"print('exists after', os.path.exists({str(answers)!r}))\n"
                        f"for dev in {disks!r}:\n"
                        "    try:\n        print('disk', dev, len(open(dev, 'rb').read(4096)))\n"
                        "    except OSError as e:\n        print('disk', dev, 0, e.strerror)\n")
    assert not err
    assert SECRET not in obs and "GOT" not in obs
    assert obs.count("refused") == 2 and "umount rc 0" not in obs  # covered (local) or not there at all
    assert "exists after False" in obs
    assert obs.count("disk /dev/") == len(disks)
    assert all(line.split()[2] == "0" for line in obs.splitlines() if line.startswith("disk ")), obs


def test_disk_outside_the_workspace_is_read_only(env):
    probe = f"/var/tmp/mlab-sandbox-probe-{uuid.uuid4().hex}"
    in_venv = os.path.join(os.path.dirname(sys.executable), f"mlab-probe-{uuid.uuid4().hex}")
    try:
        obs, err = run(env, "import os, sys\n"
                            f"for p in ({probe!r}, {in_venv!r}):\n"
                            "    try:\n        open(p, 'w').write('x')\n        print('WROTE', p)\n"
                            "    except OSError as e:\n        print('refused', e.strerror)\n"
                            "try:\n    os.rename(os.getcwd(), os.getcwd() + '_moved')\n    print('MOVED')\n"
                            "except OSError as e:\n    print('refused', e.strerror)\n"
                            "try:\n    open('/proc/sys/vm/swappiness', 'w').write('1')\n    print('SYSCTL')\n"
                            "except OSError as e:\n    print('refused', e.strerror)\n")
        assert not err
        assert "WROTE" not in obs and "MOVED" not in obs and "SYSCTL" not in obs
        assert obs.count("refused") == 4, obs
    finally:
        for path in (probe, in_venv):
            if os.path.exists(path):
                os.remove(path)


def test_api_keys_do_not_reach_scripts(any_env, monkeypatch):
    env = any_env
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    obs, err = run(env, "import os\n"
                        "print('env keys', sorted(k for k in os.environ if 'KEY' in k))\n"
                        "print('in env', any('sk-test' in v for v in os.environ.values()))\n"
                        f"for pid in {{os.getppid(), 1, {os.getpid()}}}:\n"
                        "    try:\n        data = open(f'/proc/{pid}/environ', 'rb').read()\n"
                        "        print('pid', pid, 'readable', b'sk-test' in data)\n"
                        "    except OSError as e:\n        print('pid', pid, 'unreadable')\n")
    assert not err
    assert API_KEY not in obs and "sk-test-do" not in obs
    assert "env keys []" in obs and "in env False" in obs
    assert "readable True" not in obs
    assert "pid 1 " in obs  # the check of /proc/1/environ ran


# ---- timeouts and leftover processes ------------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("sandbox", EVERY)
def test_endless_script_is_killed_at_the_timeout(tmp_path, sandbox):
    env = make_env(tmp_path, timeout=1.0, sandbox=sandbox)
    namespaces = sandbox != "fallback"
    obs, err = run(env, "import os\nopen('pid.txt', 'w').write(str(os.getpid()))\nprint('looping', flush=True)\n"
                        "while True:\n    pass\n")
    # What the limit did, not how long it took: the endless loop ends only by the kill this message reports.
    assert err and obs.startswith("EnvError: the script ran past the time limit of 1 s and was killed.")
    assert "looping" in obs
    assert (env.workspace / "pid.txt").exists()
    assert wait_gone(env.mark) == []
    if not namespaces:  # host pids: check the one the script wrote directly
        assert gone(int((env.workspace / "pid.txt").read_text()))


DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        {stdio}
        open('daemon.pid', 'w').write(str(os.getpid()))
        time.sleep(10 ** 6)
        open('daemon_survived.txt', 'w').write('yes')
        os._exit(0)
    os._exit(0)
time.sleep(0.3)
print('parent done')
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sandbox", EVERY)
@pytest.mark.parametrize("keeps_stdout", [True, False])
@pytest.mark.slow
def test_daemonized_child_is_killed(tmp_path, sandbox, keeps_stdout):
    env = make_env(tmp_path, timeout=10, sandbox=sandbox)
    namespaces = sandbox != "fallback"
    stdio = "pass" if keeps_stdout else "fd = os.open(os.devnull, os.O_RDWR); [os.dup2(fd, i) for i in (0, 1, 2)]"
    obs, err = run(env, DAEMON.format(stdio=stdio))
    # Not an error means the 10 s limit was not what ended it; a wait for the daemon's endless sleep would hang
    # into the test's own timeout.
    assert not err and "parent done" in obs, obs
    assert (env.workspace / "daemon.pid").exists()
    assert wait_gone(env.mark) == []
    if not namespaces:
        assert gone(int((env.workspace / "daemon.pid").read_text()))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("sandbox", EVERY)
def test_script_that_closes_stdout_and_sleeps_is_bounded(tmp_path, sandbox):
    # The timeout leaves a loaded machine's cold interpreter start time to print; the bounds stay far below the
    # script's 60 s sleep, which is what the harness must not wait for once the pipe is closed.
    env = make_env(tmp_path, timeout=5.0, sandbox=sandbox)
    # The sleep outlasts the test's own timeout: a harness that waited for it once the pipe closed would hang.
    obs, err = run(env, "import os, time\nprint('bye', flush=True)\nos.close(1)\nos.close(2)\ntime.sleep(10 ** 6)\n")
    assert err and "time limit of 5 s" in obs and "bye" in obs
    assert wait_gone(env.mark) == []


@pytest.mark.parametrize("name", EVERY)
@pytest.mark.slow
def test_sandbox_run_directly_reports_limits_and_streams(tmp_path, name):
    sandbox = make_sandbox(name)
    spec = ExecSpec(cwd=tmp_path, limits=Limits(timeout_s=1.0), env={"PATH": os.environ["PATH"]})
    result = sandbox.run(["sleep", "1000000"], spec)
    assert result.limit_hit == "timeout"
    result = sandbox.run(["sh", "-c", "echo hi; exit 4"], spec)
    assert (result.exit_code, result.output, result.limit_hit) == (4, "hi\n", None)
    # Output reaches an observer while the command runs, not only at its end.
    # The command waits for a file the observer writes when it sees "first": output seen only at the end would
    # leave it waiting until the time limit.
    seen: list[bytes] = []

    def observe(chunk: bytes) -> None:
        seen.append(chunk)
        if b"first" in b"".join(seen):
            (tmp_path / "seen").touch()

    spec = spec.model_copy(update={"limits": Limits(timeout_s=60)})
    result = sandbox.run(["sh", "-c", "echo first; while [ ! -e seen ]; do sleep 0.05; done; echo second"], spec,
                         on_output=observe)
    assert result.limit_hit is None and result.output == "first\nsecond\n" and b"".join(seen) == b"first\nsecond\n"


# ---- the Python REPL ----------------------------------------------------------------------------

def test_repl_keeps_state_and_runs_in_a_child(env):
    assert act(env, "Python REPL", command="import os\nx = 41") == ("", False)
    assert act(env, "Python REPL", command="x + 1") == ("42\n", False)
    obs, err = act(env, "Python REPL", command="print(os.getpid(), os.getcwd())")
    assert not err
    pid, cwd = obs.split()
    assert int(pid) != os.getpid() and cwd == "."  # the workspace, as the agent is shown it
    assert env._repl.pid != os.getpid()
    obs, err = act(env, "Python REPL", command="1/0")
    assert err and "ZeroDivisionError" in obs
    assert act(env, "Python REPL", command="x") == ("41\n", False)  # an exception keeps the state


def test_repl_survives_exit_and_protocol_abuse(env):
    act(env, "Python REPL", command="x = 1")
    obs, err = act(env, "Python REPL", command="print('before', flush=True)\nimport os\nos._exit(3)")
    assert err and obs.startswith("EnvError: the REPL process exited (code 3) and its variables are lost")
    assert "before" in obs
    obs, err = act(env, "Python REPL", command="x")
    assert err and "NameError" in obs  # a fresh interpreter: the name is gone, and the command failed
    assert act(env, "Python REPL", command="import sys\nsys.exit(5)\n'still here'")[0].startswith("SystemExit: 5")
    assert act(env, "Python REPL", command="'alive'") == ("'alive'\n", False)
    obs, err = act(env, "Python REPL", command="input()")
    assert err and "EOFError" in obs  # stdin is not the command channel
    obs, err = act(env, "Python REPL", command="import os\nos.write(1, b'raw\\n')\nos.close(1)")
    assert not err and "raw" in obs
    assert act(env, "Python REPL", command="1 + 1") == ("2\n", False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sandbox", EVERY)
@pytest.mark.slow
def test_repl_timeout_kills_and_restarts(tmp_path, sandbox):
    env = make_env(tmp_path, timeout=1.0, sandbox=sandbox)
    act(env, "Python REPL", command="y = 7")
    obs, err = act(env, "Python REPL", command="print('spinning', flush=True)\nwhile True: pass")
    assert err and obs.startswith("EnvError: the REPL command ran past the time limit of 1 s and was killed")
    assert "spinning" in obs
    assert wait_gone(env.mark) == []
    obs, err = act(env, "Python REPL", command="y")
    assert err and "NameError" in obs
    env.close()
    assert wait_gone(env.mark) == []


@pytest.mark.parametrize("sandbox", EVERY)
def test_repl_confinement_and_output_cap(tmp_path, monkeypatch, sandbox):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    env = make_env(tmp_path, output_bytes=50_000, sandbox=sandbox)
    obs, err = act(env, "Python REPL", command="import os\n[k for k in os.environ if 'KEY' in k]")
    assert (obs, err) == ("[]\n", False)
    obs, err = act(env, "Python REPL", command="print('z' * 2_000_000, end='')")
    assert not err and "bytes of output left out" in obs and len(obs) < 60_000
    if sandbox != "fallback":
        answers = tmp_path / "taskdata" / "hidden" / "answers.csv"
        obs, err = act(env, "Python REPL", command=f"open({str(answers)!r}).read()")
        assert err and SECRET not in obs and "Error" in obs
        obs, err = act(env, "Python REPL", command="open('data/train.csv', 'w').write('hacked')")
        assert err and "Read-only file system" in obs
        assert (env.workspace / "data" / "train.csv").read_text() == TRAIN
    env.close()


HARNESS = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_sandbox import make_env, run
env = make_env(Path({tmp!r}), timeout=60, sandbox={sandbox!r})
env.s.extra_env["MLAB_TEST_MARK"] = {mark!r}
run(env, "import time\\nopen('started.txt', 'w').write('1')\\ntime.sleep(30)\\nopen('after.txt', 'w').write('1')\\n")
"""


def kill_harness_when(template: str, tmp_path: Path, sandbox: str, marker: str, within_s: float) -> str:
    """Start a harness process from template, and SIGKILL it once it wrote `marker` into the workspace (the
    sandbox's processes are then running or frozen). Returns the mark those processes carry."""
    import signal
    import subprocess
    mark = uuid.uuid4().hex
    code = template.format(tests=str(Path(__file__).parent), tmp=str(tmp_path), sandbox=sandbox, mark=mark)
    harness = subprocess.Popen([sys.executable, "-c", code])
    written = tmp_path / "ws" / marker
    deadline = time.monotonic() + within_s
    while not written.exists() and time.monotonic() < deadline and harness.poll() is None:
        time.sleep(0.05)
    assert written.exists()
    assert marked_processes(mark)
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    return mark


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("sandbox", EVERY)
def test_script_dies_with_a_killed_harness(tmp_path, sandbox):
    """A SIGKILLed run must not leave its script running: it would write into the workspace a resume restores."""
    make_sandbox(sandbox)  # skips when unusable here
    mark = kill_harness_when(HARNESS, tmp_path, sandbox, "started.txt", within_s=60)
    assert wait_gone(mark) == []
    assert not (tmp_path / "ws" / "after.txt").exists()


REPL_HARNESS = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_sandbox import act, make_env
env = make_env(Path({tmp!r}), timeout=60, sandbox={sandbox!r})
env.s.extra_env["MLAB_TEST_MARK"] = {mark!r}
act(env, "Python REPL", command="x = 1")
(env.workspace / "frozen.txt").write_text("1")  # the REPL is frozen between actions now
time.sleep(30)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("sandbox", EVERY)
def test_frozen_repl_dies_with_a_killed_harness(tmp_path, sandbox):
    """A REPL frozen between actions (stopped, or a paused container) is gone too when the harness is killed."""
    make_sandbox(sandbox)
    mark = kill_harness_when(REPL_HARNESS, tmp_path, sandbox, "frozen.txt", within_s=60)
    assert wait_gone(mark) == []


@pytest.mark.parametrize("sandbox", CONFINED)
def test_tmp_is_private(tmp_path, sandbox):
    """Other runs' files in the host's /tmp are out of reach, and what a script puts in /tmp stays its own."""
    probe = Path(f"/tmp/mlab-host-probe-{uuid.uuid4().hex}")
    probe.write_text("host file\n")
    try:
        env = make_env(tmp_path, sandbox=sandbox)
        obs, err = run(env, "import os\n"
                            f"print('sees host file', os.path.exists({str(probe)!r}))\n"
                            f"print('sees its own test folder', os.path.exists({str(tmp_path / 'taskdata')!r}))\n"
                            f"open({str(probe) + '-mine'!r}, 'w').write('x')\n"
                            f"print('wrote', open({str(probe) + '-mine'!r}).read())\n")
        assert not err and "sees host file False" in obs and "sees its own test folder False" in obs, obs
        assert "wrote x" in obs and not os.path.exists(str(probe) + "-mine")
    finally:
        probe.unlink()


@pytest.mark.parametrize("sandbox", CONFINED)
@pytest.mark.parametrize("where", ["/tmp", "/var/tmp"])
def test_interpreter_below_tmp_is_usable_and_read_only(tmp_path, sandbox, where):
    """A venv below /tmp (a clone there) runs and stays read-only, although scripts get a /tmp of their own."""
    import subprocess
    make_sandbox(sandbox)
    venvs = Path(tempfile.mkdtemp(prefix="mlab-venv-", dir=where))
    try:
        venv = venvs / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        env = make_env(tmp_path, sandbox=sandbox, python=str(venv / "bin" / "python"))
        obs, err = run(env, f"import sys\nprint(sys.prefix)\nopen({str(venv / 'x')!r}, 'w')\n")
        assert err and str(venv) in obs and "Read-only file system" in obs, obs
        env.close()
    finally:
        shutil.rmtree(venvs, ignore_errors=True)


def test_proc_is_writable_where_the_process_owns_it_and_not_where_the_kernel_is(env):
    """CUDA's driver does not start with a read-only /proc (found on an H100: cuInit fails with
    CUDA_ERROR_OPERATING_SYSTEM): a command may write its own /proc files, never the host kernel's knobs."""
    obs, err = run(env, "import os\n"
                        "open(f'/proc/{os.getpid()}/comm', 'w').write('renamed')\n"
                        "print('comm', open('/proc/self/comm').read().strip())\n"
                        "for p in ('/proc/sys/vm/swappiness', '/proc/sysrq-trigger'):\n"
                        "    try:\n        open(p, 'a').close()\n        print('OPENED', p)\n"
                        "    except OSError as e:\n        print('refused', p)\n")
    assert not err, obs
    assert "comm renamed" in obs and "OPENED" not in obs and obs.count("refused") == 2, obs
