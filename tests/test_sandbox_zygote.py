"""The local sandbox's per-run zygote: commands forked from namespaces and a root built once per run keep every
guarantee of a root built per command (tests/test_sandbox.py and test_sandbox_view.py run through it too), and
the zygote itself is replaced when it dies or what it shows is replaced, and never outlives the harness."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox, confine_program, namespace_prefix, plan_of
from mlab.core.sandbox.process import ProcessCommand
from mlab.core.sandbox.rootfs import root_view
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.sandbox.zygote import NotForZygote
from tests.fixtures.users import as_nobody

pytestmark = pytest.mark.skipif(namespace_prefix() is None, reason="needs mount/PID namespaces (unshare)")

REPO = Path(__file__).resolve().parents[1]

# What a command sees of its namespaces: its pid, the pids in its /proc, its /tmp, the mount points it has.
PROBE = textwrap.dedent("""
    import os, sys
    pids = sorted(int(n) for n in os.listdir('/proc') if n.isdigit())
    mounts = sorted({line.split()[4] for line in open('/proc/self/mountinfo')})  # a set: the zygote's are under
    print('pid', os.getpid(), 'pids', pids, 'tmp', sorted(os.listdir('/tmp')), 'shm', os.listdir('/dev/shm'))
    print('hidden', [os.path.exists(p) for p in sys.argv[1:]])
    print('mounts', mounts)
""")


def spec_for(tmp_path: Path, **changes) -> ExecSpec:
    ws, home = tmp_path / "ws", tmp_path / "home"
    ws.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    fields = {"cwd": ws, "writable_paths": [home], "env": {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
              "limits": Limits(timeout_s=30), **changes}
    return ExecSpec(**fields)


def the_zygote(box: LocalSandbox):
    assert len(box._zygotes) == 1, box._zygotes
    return next(iter(box._zygotes.values()))


def serving_pid(zygote) -> int:
    """The zygote's pid (PID 1 of the run's namespaces), the only child of the process the harness started."""
    with open(f"/proc/{zygote.proc.pid}/task/{zygote.proc.pid}/children") as f:
        children = f.read().split()
    assert len(children) == 1, children
    return int(children[0])


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def probe(box: LocalSandbox, spec: ExecSpec, *hidden: Path) -> str:
    result = box.run([sys.executable, "-c", PROBE, *map(str, hidden)], spec)
    assert result.exit_code == 0, result.output
    return result.output


def test_commands_come_from_one_zygote_and_see_the_same_root_as_a_fresh_one(tmp_path):
    """The zygote's commands see exactly the mounts, /proc, /tmp and /dev/shm a root built for the command alone
    shows; the zygote serves every command of the plan."""
    spec = spec_for(tmp_path)
    zygoted, fresh = LocalSandbox(), LocalSandbox(zygotes=False)
    try:
        outputs = [probe(zygoted, spec), probe(zygoted, spec)]
        zygote = the_zygote(zygoted)
        assert the_zygote(zygoted) is zygote and zygote.proc.poll() is None
        assert outputs[0] == outputs[1] == probe(fresh, spec)
        assert "pid 2 pids [1, 2] tmp ['" in outputs[0]  # its own init and itself; /tmp holds only the workspace
        assert not fresh._zygotes
    finally:
        zygoted.close()
    assert zygote.proc.poll() is not None  # closing the sandbox ends its zygote


def test_each_command_gets_a_fresh_tmp_and_dev_shm(tmp_path):
    box = LocalSandbox()
    try:
        spec = spec_for(tmp_path)
        wrote = box.run([sys.executable, "-c", "open('/tmp/left', 'w').write('x'); open('/dev/shm/left', 'w')"],
                        spec)
        assert wrote.exit_code == 0, wrote.output
        assert "tmp ['" in (seen := probe(box, spec)) and "left" not in seen, seen
    finally:
        box.close()


def test_a_killed_zygote_is_replaced_and_the_next_command_still_confined(tmp_path):
    """SIGKILL of the zygote ends the command it was running (it is PID 1 of the run's namespaces); the next
    command gets a new zygote and the same confinement."""
    hidden = tmp_path / "home" / "answers"
    spec = spec_for(tmp_path, hidden_paths=[hidden])
    hidden.mkdir()
    (hidden / "labels.csv").write_text("secret\n")
    box = LocalSandbox()
    try:
        before = probe(box, spec, hidden / "labels.csv")
        running = box.popen([sys.executable, "-c", "import time; time.sleep(60)"], spec)
        old = the_zygote(box)
        os.kill(serving_pid(old), signal.SIGKILL)
        assert running.wait(timeout=20) == -signal.SIGKILL
        box.release(running)
        after = probe(box, spec, hidden / "labels.csv")
        new = the_zygote(box)
        assert new is not old and new.proc.poll() is None and old.proc.poll() is not None
        assert after == before and "hidden [False]" in after, after
    finally:
        box.close()


def test_two_commands_at_once_cannot_see_or_signal_each_other(tmp_path):
    """A command sees only its own init and processes in /proc, cannot signal another command's processes, and
    does not see its /tmp, though both run at the same time from one zygote."""
    spec = spec_for(tmp_path)
    ws = spec.cwd
    box = LocalSandbox()
    other_mark = f"OTHER-{uuid.uuid4().hex}"
    other_code = textwrap.dedent(f"""
        import os, time
        # {other_mark}
        open('/tmp/other-was-here', 'w').write('x')
        open('other-started', 'w').write(str(os.getpid()))
        deadline = time.monotonic() + 30
        while not os.path.exists('prober-done') and time.monotonic() < deadline:
            time.sleep(0.01)
        print('other survived', os.path.exists('prober-done'))
    """)
    prober_code = textwrap.dedent(f"""
        import os, signal, time
        deadline = time.monotonic() + 30
        while not os.path.exists('other-started') and time.monotonic() < deadline:
            time.sleep(0.01)
        seen, killed = [], []
        for name in os.listdir('/proc'):
            if name.isdigit():
                with open(f'/proc/{{name}}/cmdline', 'rb') as f:
                    seen.append(f.read())
                if int(name) not in (1, os.getpid()):
                    try:
                        os.kill(int(name), signal.SIGKILL)
                        killed.append(name)
                    except OSError:
                        pass
        for pid in range(2, 400):  # pids of the other namespace, should they be reachable by number
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except OSError:
                    pass
        needle = {other_mark[::-1]!r}[::-1].encode()  # not in this command's own command line
        print('processes seen', len(seen), 'marked', any(needle in c for c in seen))
        print('killed', killed, 'sees its tmp', os.path.exists('/tmp/other-was-here'))
        open('prober-done', 'w').write('1')
    """)
    try:
        other = box.popen([sys.executable, "-c", other_code], spec)
        prober = box.run([sys.executable, "-c", prober_code], spec)
        assert prober.exit_code == 0, prober.output
        assert "processes seen 2 marked False" in prober.output, prober.output
        assert "killed [] sees its tmp False" in prober.output, prober.output
        assert other.wait(timeout=30) == 0
        assert (ws / "other-started").exists()
        assert b"other survived True" in other.stdout.read()
        assert len(box._zygotes) == 1  # both came from the run's zygote
        box.release(other)
    finally:
        box.close()


def test_a_replaced_workspace_or_hidden_folder_rebuilds_the_zygote(tmp_path):
    """The root pins what it shows by inode: after the host replaces the workspace, commands write into the
    new one; after a hidden folder inside a shown one is swapped for another, the new one is covered too."""
    hidden = tmp_path / "home" / "answers"
    spec = spec_for(tmp_path, hidden_paths=[hidden])
    hidden.mkdir()
    (hidden / "labels.csv").write_text("first secret\n")
    box = LocalSandbox()
    read = [sys.executable, "-c", f"import os; print('sees', os.path.exists({str(hidden / 'labels.csv')!r}))"]
    try:
        assert "sees False" in box.run(read, spec).output
        first = the_zygote(box)
        hidden.rename(tmp_path / "answers-moved")
        hidden.mkdir()
        (hidden / "labels.csv").write_text("second secret\n")
        assert "sees False" in box.run(read, spec).output
        second = the_zygote(box)
        assert second is not first
        spec.cwd.rename(tmp_path / "ws-old")
        spec.cwd.mkdir()
        wrote = box.run([sys.executable, "-c", "open('made.txt', 'w').write('x')"], spec)
        assert wrote.exit_code == 0, wrote.output
        assert (spec.cwd / "made.txt").exists() and not (tmp_path / "ws-old" / "made.txt").exists()
    finally:
        box.close()


def test_a_command_whose_init_cannot_be_set_up_exits_120_with_the_sandbox_message(tmp_path):
    """A failure in the command's own set-up (here a directory its root does not show) is told as exit code
    120 with the sandbox's message, as with a root built per command."""
    box = LocalSandbox()
    try:
        spec = spec_for(tmp_path)
        assert box.run(["true"], spec).exit_code == 0
        elsewhere = tmp_path / "not-shown"
        elsewhere.mkdir()
        proc = ProcessCommand(*the_zygote(box).start(["true"], spec.model_copy(update={"cwd": elsewhere}), []))
        assert proc.wait(timeout=20) == 120
        assert proc.stdout.read().decode().startswith("mlab sandbox: ")
        box.release(proc)
    finally:
        box.close()


@pytest.mark.slow  # over 2 s on two cores
def test_an_idle_zygote_ends_but_not_while_a_command_runs_and_the_next_command_gets_another(tmp_path):
    spec = spec_for(tmp_path)
    box = LocalSandbox(zygote_idle_s=0.3)
    try:
        running = box.popen([sys.executable, "-c", "import time; time.sleep(1.5); print('done')"], spec)
        zygote = the_zygote(box)
        assert running.wait(timeout=20) == 0 and running.stdout.read() == b"done\n"  # outlived several idle spans
        box.release(running)
        assert wait_until(lambda: zygote.proc.poll() is not None, 20)  # then idle, and gone
        assert box.run(["true"], spec).exit_code == 0
        assert the_zygote(box) is not zygote
    finally:
        box.close()


def test_a_dropped_sandbox_leaves_no_zygote(tmp_path):
    """A sandbox used once and dropped without close() (as a task's scorer does) ends its zygote."""
    box = LocalSandbox()
    assert box.run(["true"], spec_for(tmp_path)).exit_code == 0
    zygote = the_zygote(box)
    outer = zygote.proc
    serving = serving_pid(zygote)
    del box, zygote
    assert wait_until(lambda: not alive(serving) and outer.poll() is not None, 10)


def test_a_root_that_cannot_be_built_gives_exit_code_120_and_the_reason_for_every_command(tmp_path, monkeypatch):
    """When the zygote cannot build the root, each command runs confine.py afresh, which fails the same way and
    says why (exit code 120 and the sandbox's message), and no zygote is tried again for that plan."""
    from mlab.core.sandbox import local

    missing = str(tmp_path / "gone")

    def broken_view(argv, spec):
        view = root_view(argv, spec)
        view.writable.append(missing)  # a bind of a folder that is not there
        return view

    monkeypatch.setattr(local, "root_view", broken_view)
    box = LocalSandbox()
    try:
        for _ in range(2):
            result = box.run(["true"], spec_for(tmp_path))
            assert result.exit_code == 120 and result.output.startswith("mlab sandbox: "), result
            assert missing in result.output
        assert not box._zygotes and len(box._unbuildable) == 1
    finally:
        box.close()


def test_a_request_too_big_for_the_zygote_runs_afresh_and_keeps_the_zygote(tmp_path, monkeypatch):
    """A request the zygote cannot take runs with a root of its own, and the zygote stays for the next command.
    A big request now travels in a memfd (the test below): what the zygote cannot take is more descriptors than
    one message carries, so that bound is lowered here until a big request's memfd is one too many."""
    from mlab.core.sandbox import zygote as zygote_module
    from mlab.core.sandbox.cgroups import CommandCgroup

    spec = spec_for(tmp_path)
    made = CommandCgroup.create(spec.limits)  # the descriptors every command of spec carries for its cgroup
    cgroup_fds = len(made.fds) if made is not None else 0
    if made is not None:
        made.close_fds()
        made.remove()
    monkeypatch.setattr(zygote_module, "MAX_FDS", 3 + cgroup_fds)
    box = LocalSandbox()
    try:
        assert box.run(["true"], spec).exit_code == 0
        zygote = the_zygote(box)
        refused = []
        start = zygote.start

        def watched_start(*args):
            try:
                return start(*args)
            except NotForZygote as exc:
                refused.append(exc)
                raise

        zygote.start = watched_start
        big = spec.model_copy(update={"env": {**spec.env, "BIG": "x" * 100_000}})  # > REQUEST_BYTES
        result = box.run([sys.executable, "-c", "import os; print(len(os.environ['BIG']))"], big)
        assert result.exit_code == 0 and result.output == "100000\n", result
        assert len(refused) == 1 and the_zygote(box) is zygote and zygote.proc.poll() is None
        assert box.run(["true"], spec).exit_code == 0 and len(refused) == 1
    finally:
        box.close()


HARNESS = """
import os, sys, time
from pathlib import Path
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.sandbox.local import LocalSandbox
ws = Path({ws!r})
box = LocalSandbox()
spec = ExecSpec(cwd=ws, env={{"PATH": "/usr/bin:/bin", "MLAB_TEST_MARK": {mark!r}}})
procs = [box.popen([sys.executable, "-c", f"import time; open('started-{{i}}', 'w'); time.sleep(120)"], spec)
         for i in range(2)]
deadline = time.monotonic() + 30
while not all((ws / f"started-{{i}}").exists() for i in range(2)) and time.monotonic() < deadline:
    time.sleep(0.01)  # both commands have started (a process frozen before its exec would carry no mark)
if {frozen!r}:
    box.freeze(procs[0])
zygote = next(iter(box._zygotes.values()))
children = open(f"/proc/{{zygote.proc.pid}}/task/{{zygote.proc.pid}}/children").read().split()
(ws / "zygote.txt").write_text(" ".join(map(str, [zygote.proc.pid, *children])))
time.sleep(120)
"""


def marked(mark: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if f"MLAB_TEST_MARK={mark}".encode() in f.read() and alive(int(name)):
                        found.append(int(name))
            except OSError:
                continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("frozen", [False, True])
def test_no_zygote_or_command_outlives_a_killed_harness(tmp_path, frozen):
    """kill -9 of the harness: its zygotes and every command they run (frozen ones too) are gone."""
    ws = tmp_path / "ws"
    ws.mkdir()
    mark = uuid.uuid4().hex
    harness = subprocess.Popen([sys.executable, "-c", HARNESS.format(ws=str(ws), mark=mark, frozen=frozen)],
                               cwd=REPO)
    try:
        assert wait_until(lambda: (ws / "zygote.txt").exists() or harness.poll() is not None, 30)
        assert harness.poll() is None
        assert wait_until(lambda: len(marked(mark)) == 2, 10), marked(mark)
        zygote_pids = [int(p) for p in (ws / "zygote.txt").read_text().split()]
        assert len(zygote_pids) == 2 and all(alive(p) for p in zygote_pids)
    finally:
        harness.kill()
        harness.wait()
    assert wait_until(lambda: not marked(mark) and not any(alive(p) for p in zygote_pids), 10), \
        (marked(mark), [p for p in zygote_pids if alive(p)])


# A harness speaking the zygote's protocol with the standard library alone, for a user that cannot import mlab.
UNPRIVILEGED_HARNESS = """
import array, marshal, os, socket, struct, subprocess, sys
confine, plan, ws, code = sys.argv[1:5]
ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
outer = subprocess.Popen([sys.executable, "-I", "-S", "-B", confine, "--serve", str(theirs.fileno()), "30", plan],
                         pass_fds=[theirs.fileno()])
theirs.close()
print("ready", ours.recv(16) == b"ready")
for _ in range(2):
    mine, sent = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    out, out_w = os.pipe()
    request = marshal.dumps({"argv": [sys.executable, "-c", code], "env": {"PATH": "/usr/bin:/bin"}, "cwd": ws,
                             "protected": [], "stdin": False, "rlimits": []})
    ours.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [sent.fileno(), out_w]))])
    sent.close()
    os.close(out_w)
    started, ancillary, _, _ = mine.recvmsg(16, socket.CMSG_SPACE(12))
    pid = struct.unpack("3i", ancillary[0][2][:12])[0]
    with open(f"/proc/{pid}/status") as f:  # the pid here, then in the run's and in the command's namespace
        nspid = [line.split()[1:] for line in f if line.startswith("NSpid:")][0]
    open(os.path.join(ws, "checked"), "w").close()  # the command waits for this, so that its init lives
    print("started", started == b"started", "init's pids", nspid[0] == str(pid), nspid[1:][-1:], len(nspid))
    print("status", mine.recv(64).decode(), "output", os.read(out, 65536).decode().strip())
    os.remove(os.path.join(ws, "checked"))
ours.close()
print("zygote exit", outer.wait())
"""


def test_the_zygote_confines_for_a_harness_that_is_not_root(tmp_path):
    """Run by an unprivileged user, the zygote makes a user namespace of its own once, and each command it
    forks gets its own PID namespace and /proc and the same file system: root only inside, no host home."""
    system_python, setpriv = as_nobody()
    base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path.home()
    folder = base / f"mlab-zygote-{uuid.uuid4().hex[:10]}"  # pytest's own tmp_path is open to root alone
    ws = folder / "ws"
    ws.mkdir(parents=True)
    try:
        shutil.copy(confine_program(), folder / "confine.py")
        (folder / "harness.py").write_text(UNPRIVILEGED_HARNESS)
        for path in (folder, ws):
            os.chmod(path, 0o777)
        view = root_view([system_python], ExecSpec(cwd=ws))
        view.late_read_only = []  # only what an unprivileged harness could itself read: the system's Python
        code = ("import os, time; open('made.txt', 'a').write('x'); deadline = time.monotonic() + 30\n"
                "while not os.path.exists('checked') and time.monotonic() < deadline: time.sleep(0.01)\n"
                "print(os.getuid(), os.getpid(), sorted(int(n) for n in os.listdir('/proc') if n.isdigit()), "
                f"os.path.exists({str(Path.home())!r}), os.path.exists({str(REPO)!r}))")
        result = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", system_python, "-I",
             str(folder / "harness.py"), str(folder / "confine.py"), plan_of(view), str(ws), code],
            cwd=ws, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        command = "status exit 0 output 0 2 [1, 2] False False"
        started = "started True init's pids True ['1'] 3"  # host, run, command namespaces
        assert result.stdout.splitlines() == ["ready True", *[started, command] * 2, "zygote exit 0"], result.stdout
        assert (ws / "made.txt").read_text() == "xx" and (ws / "made.txt").stat().st_uid == 65534
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_a_finished_run_ends_its_zygote(tmp_path, monkeypatch):
    """The runner lets go of its sandbox when the run ends: the zygote that ran its commands is gone at once, not
    after its idle time (the runner is still referenced, so no garbage collection ends it)."""
    from mlab.core import RunConfig
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.runner import Runner

    zygotes = []
    original = LocalSandbox.popen

    def watched(self, argv, spec):
        proc = original(self, argv, spec)
        zygotes.extend(z.proc for z in self._zygotes.values() if z.proc not in zygotes)
        return proc

    monkeypatch.setattr(LocalSandbox, "popen", watched)
    runner = Runner(tmp_path / "run", RunConfig(task="lite/wine", agent="baseline", sandbox="local"), load_registry())
    trace = runner.start()
    assert trace.final_score is not None, trace.final_score_error
    assert zygotes, "the run's commands came from no zygote"
    assert wait_until(lambda: all(proc.poll() is not None for proc in zygotes), 10)


def test_a_request_bigger_than_a_socket_message_runs_through_the_zygote(tmp_path):
    """A request past REQUEST_BYTES (a long environment, many arguments, thousands of protected files) is no
    cliff: it travels in a descriptor beside the message, and the zygote that holds the run's root starts it."""
    from mlab.core.sandbox.confine import REQUEST_BYTES
    from mlab.core.sandbox.zygote import ConfinedCommand

    spec = spec_for(tmp_path)
    box = LocalSandbox()
    try:
        assert box.run(["true"], spec).exit_code == 0
        zygote = the_zygote(box)
        big = spec.model_copy(update={"env": {**spec.env, "BIG": "x" * 100_000}})
        parts = [str(n) * 100_000 for n in range(1, 6)]  # each under the kernel's bound on one argument
        assert len(parts) * 100_000 + 100_000 > 8 * REQUEST_BYTES
        code = "import os, sys; print(len(os.environ['BIG']), [len(a) for a in sys.argv[1:]], sys.argv[5][:3])"
        proc = box.popen([sys.executable, "-c", code, *parts], big)
        assert isinstance(proc.process, ConfinedCommand)  # forked by the zygote, not a root of its own
        output = proc.stdout.read().decode()
        assert proc.wait(timeout=30) == 0, output
        box.release(proc)
        assert output == f"100000 {[100_000] * 5} 555\n", output
        assert the_zygote(box) is zygote and zygote.proc.poll() is None and zygote.live == 0
        assert box.run(["true"], spec).exit_code == 0 and the_zygote(box) is zygote
    finally:
        box.close()


def test_starting_a_command_closes_each_descriptor_once(tmp_path, monkeypatch):
    """The cgroup's descriptors travel with the request and are closed by their owner alone: closed twice, the
    second close could take a descriptor another thread of the harness had opened under the same number."""
    spec = spec_for(tmp_path, limits=Limits(timeout_s=30, max_processes=64))
    box = LocalSandbox()
    try:
        assert box.run(["true"], spec).exit_code == 0
        zygote = the_zygote(box)
        closed: list[int] = []
        real_close = os.close

        def recording_close(fd: int) -> None:
            closed.append(fd)
            real_close(fd)

        monkeypatch.setattr(os, "close", recording_close)
        proc = ProcessCommand(*zygote.start(["true"], spec, []))
        monkeypatch.setattr(os, "close", real_close)
        assert proc.wait(timeout=30) == 0
        box.release(proc)
        assert closed and sorted(closed) == sorted(set(closed)), closed
    finally:
        box.close()
