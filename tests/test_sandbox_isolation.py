"""What agent code can no longer reach from the default local sandbox (and bwrap alike): the host's loopback
services, the host's /dev/shm and /dev. A task that declares it needs the network keeps the host's."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import uuid

import pytest

from tests.fixtures.sandboxes import CONFINING
from tests.test_sandbox import make_env, run

SANDBOXES = CONFINING  # every registered sandbox that confines (tests/fixtures/sandboxes.py)


@pytest.fixture
def listener():
    """A port on the host's loopback, and an event set once it has accepted a connection (set by a thread of its
    own: a positive test waits for it, since a connect returns before the accept runs)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    accepted = threading.Event()

    def accept():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            accepted.set()
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield sock.getsockname()[1], accepted
    sock.close()


PROBE = ("import socket\n"
         "try:\n"
         "    socket.create_connection(('127.0.0.1', {port}), timeout=3).close(); print('REACHED')\n"
         "except OSError as exc:\n"
         "    print('UNREACHABLE', exc)\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
         "c = socket.create_connection(s.getsockname(), timeout=3); print('OWN LOOPBACK OK')\n")


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_host_loopback_services_are_out_of_reach_but_a_loopback_of_its_own_works(tmp_path, sandbox, listener):
    port, accepted = listener
    env = make_env(tmp_path, sandbox=sandbox)
    try:
        out, error = run(env, PROBE.format(port=port))
    finally:
        env.close()
    assert not error, out
    assert "UNREACHABLE" in out and "REACHED" not in out.replace("UNREACHABLE", "") and not accepted.is_set()
    assert "OWN LOOPBACK OK" in out


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_task_that_declares_the_network_reaches_it(tmp_path, sandbox, listener):
    port, accepted = listener
    env = make_env(tmp_path, sandbox=sandbox)
    env.s.network = True  # what the harness sets for a task declaring network_at_run_time
    try:
        out, error = run(env, PROBE.format(port=port))
    finally:
        env.close()
    assert not error and "REACHED" in out.replace("UNREACHABLE", ""), out
    # stress run 1 of 3: the script had connected, the listener's thread had not yet run (a deadline, not a bound)
    assert accepted.wait(timeout=120), "the probe connected but the listener never accepted"


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_dev_shm_and_dev_are_private_and_minimal(tmp_path, sandbox):
    mark = uuid.uuid4().hex
    env = make_env(tmp_path, sandbox=sandbox)
    try:
        out, error = run(env, (
            "import os\n"
            f"open('/dev/shm/{mark}', 'wb').write(b'x' * 4096)\n"
            "print('WROTE SHM')\n"
            "print('DEV', sorted(os.listdir('/dev')))\n"
            "print('BLOCK', [n for n in os.listdir('/dev') if os.path.exists('/dev/' + n) and "
            "__import__('stat').S_ISBLK(os.stat('/dev/' + n).st_mode)])\n"
            "open('/dev/null', 'w').write('ok'); print('NULL OK', len(open('/dev/urandom', 'rb').read(8)))\n"))
    finally:
        env.close()
    assert not error and "WROTE SHM" in out and "NULL OK 8" in out, out
    assert not os.path.exists(f"/dev/shm/{mark}"), "the script wrote the host's /dev/shm"
    assert "BLOCK []" in out, out
    listed = out.split("DEV ", 1)[1].splitlines()[0]
    for host_only in ("sda", "vda", "nvme0n1", "kmsg", "mem"):
        assert f"'{host_only}'" not in listed, listed


def test_the_run_folder_and_the_harness_users_home_are_hidden_from_agent_code(tmp_path):
    """A run folder outside /tmp (whose own /tmp is private already) keeps its trace, snapshots and objects
    away from agent code; so does the harness user's home; the workspace, the sandbox home and the interpreter
    stay usable."""
    from pathlib import Path

    from mlab.core.run.environment import Environment, EnvSettings
    from mlab.core.run.snapshot import SnapshotStore
    from mlab.core.sandbox.limits import Limits
    from tests.test_sandbox import make_sandbox

    make_sandbox("local")
    base = Path(tempfile.mkdtemp(prefix="mlab-test-", dir="/var/tmp"))
    marker = Path(os.path.expanduser("~")) / f".mlab-test-secret-{uuid.uuid4().hex}"
    try:
        run_dir = base / "run"
        ws = run_dir / "workspace"
        ws.mkdir(parents=True)
        (run_dir / "config.json").write_text("{}")
        (run_dir / "trace.json").write_text('{"answer": "RUN-SECRET"}')
        (run_dir / "objects").mkdir()
        (run_dir / "objects" / "blob").write_text("RUN-SECRET")
        marker.write_text("HOME-SECRET")
        env = Environment(EnvSettings(workspace=ws, read_only_patterns=[], sandbox=make_sandbox("local"),
                                      store=SnapshotStore(run_dir), sandbox_home=run_dir / "home",
                                      limits=Limits(timeout_s=30)))
        try:
            out, error = run(env, (
                "import os, sys\n"
                "for path in ['../trace.json', '../objects/blob', " + repr(str(marker)) + "]:\n"
                "    try:\n"
                "        print(path, open(path).read())\n"
                "    except OSError as exc:\n"
                "        print(path, 'HIDDEN', type(exc).__name__)\n"
                "open('written.txt', 'w').write('ok'); open(os.environ['HOME'] + '/h.txt', 'w').write('ok')\n"
                "import json, sqlite3; print('PYTHON OK', sys.version_info[0])\n"))
        finally:
            env.close()
        assert not error and "PYTHON OK 3" in out, out
        assert "SECRET" not in out and out.count("HIDDEN") == 3, out
        assert (ws / "written.txt").read_text() == "ok" and (run_dir / "home" / "h.txt").read_text() == "ok"
        assert (run_dir / "trace.json").read_text() == '{"answer": "RUN-SECRET"}'  # untouched on the host
    finally:
        marker.unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_gpu_device_nodes_pass_into_every_sandbox(tmp_path, sandbox, stand_in_gpu):
    """The stricter sandboxes must not lock GPUs out: the host's GPU nodes are passed through."""
    node = stand_in_gpu
    env = make_env(tmp_path, sandbox=sandbox)
    try:
        out, error = run(env, (
            "import os, stat\n"
            f"print('CHAR', stat.S_ISCHR(os.stat({node!r}).st_mode))\n"
            f"with open({node!r}, 'wb') as f:\n"
            "    f.write(b'kernel launch')\n"
            "print('WROTE')\n"))
    finally:
        env.close()
    if not error and "CHAR True" in out and "WROTE" in out:
        return
    # Whether the host still had the node, and what the engine logged, tell a harness fault from a vanished node.
    from tests.fixtures import docker_engine

    log = docker_engine.log_tail(lines=20) if sandbox == "docker" else ""
    pytest.fail(f"{out}\non the host now: {os.path.exists(node)}\n{log}")


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_gpu_device_gone_before_the_command_starts_is_left_out(tmp_path, sandbox, monkeypatch):
    """A device node listed when the command's root is planned and gone when it is mounted (unplugged; another
    test's stand-in) is left out rather than failing the command."""
    from mlab.core.sandbox import rootfs

    gone = f"/dev/nvidia-mlab-gone-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(rootfs, "gpu_devices", lambda gpus=None: [gone])
    env = make_env(tmp_path, sandbox=sandbox)
    try:
        out, error = run(env, f"import os\nprint('RAN', os.path.exists({gone!r}))\n")
    finally:
        env.close()
    assert not error and "RAN False" in out, out


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.slow
def test_a_training_step_on_the_gpu_inside_each_sandbox(tmp_path, sandbox):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    env = make_env(tmp_path, sandbox=sandbox, timeout=300.0)
    try:
        out, error = run(env, (
            "import torch\n"
            "model = torch.nn.Linear(8, 1).cuda()\n"
            "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "x, y = torch.randn(32, 8, device='cuda'), torch.randn(32, 1, device='cuda')\n"
            "loss = torch.nn.functional.mse_loss(model(x), y); loss.backward(); opt.step()\n"
            "print('STEP ON', torch.cuda.get_device_name(0))\n"))
    finally:
        env.close()
    assert not error and "STEP ON" in out, out


def test_password_hashes_and_host_daemon_sockets_are_out_of_reach(tmp_path):
    """Agent code runs as uid 0 without capabilities: file permissions alone would let it read /etc/shadow and
    connect to root's daemon sockets under /run (a Docker socket is the host's root)."""
    if not os.path.isdir("/run") or os.path.islink("/run"):
        pytest.skip("this host has no /run folder")
    socket_path = f"/run/mlab-test-{uuid.uuid4().hex[:8]}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(socket_path)
    server.listen(1)
    try:
        env = make_env(tmp_path, sandbox="local")
        try:
            out, error = run(env, (
                "import os, socket\n"
                "try:\n"
                "    print('SHADOW', repr(open('/etc/shadow').read()[:40]))\n"
                "except OSError as exc:\n"
                "    print('SHADOW', type(exc).__name__)\n"
                "try:\n"
                "    print('RUN', sorted(os.listdir('/run')))\n"
                "except OSError as exc:\n"
                "    print('RUN', type(exc).__name__)\n"
                "s = socket.socket(socket.AF_UNIX)\n"
                "try:\n"
                f"    s.connect({socket_path!r}); print('CONNECTED')\n"
                "except OSError as exc:\n"
                "    print('REFUSED', type(exc).__name__)\n"))
        finally:
            env.close()
    finally:
        server.close()
        os.unlink(socket_path)
    assert not error, out
    assert "SHADOW ''" in out or "SHADOW FileNotFoundError" in out or "SHADOW PermissionError" in out, out
    assert ("RUN []" in out or "RUN PermissionError" in out or "RUN FileNotFoundError" in out) and \
        "mlab-test-" not in out.split("RUN", 1)[1], out
    assert "REFUSED" in out and "CONNECTED" not in out, out


def test_mlab_gpu_devices_chooses_the_nodes_every_sandbox_gets(tmp_path, monkeypatch):
    """One GPU of several per run: MLAB_GPU_DEVICES replaces the default globs; set empty, no GPU is passed."""
    from mlab.core.sandbox import rootfs

    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).write_text("")
    monkeypatch.setenv("MLAB_GPU_DEVICES", f"{tmp_path}/nvidia0:{tmp_path}/nvidiactl:{tmp_path}/nvidia-uvm*:"
                                           f"{tmp_path}/nvidia0:relative/nvidia*:{tmp_path}/absent")
    assert rootfs.gpu_devices() == [f"{tmp_path}/nvidia0", f"{tmp_path}/nvidiactl", f"{tmp_path}/nvidia-uvm"]
    monkeypatch.setenv("MLAB_GPU_DEVICES", "")
    assert rootfs.gpu_devices() == []
    monkeypatch.delenv("MLAB_GPU_DEVICES")
    assert rootfs.gpu_devices() == [p for g in rootfs.GPU_DEVICE_GLOBS for p in sorted(__import__("glob").glob(g))]
