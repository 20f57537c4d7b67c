"""What agent code sees of the host, in every confined sandbox (the default local one above all).

A hostile script plants nothing and reads everything it can: the test first plants files whose names carry a
fresh mark in every place the harness or its user keeps something (the run's own folder outside /tmp with its
trace, snapshots and objects, another run, another MLAB_HOME's hidden answers and LLM cache, a --data-dir source,
the harness user's home, a 0600 file, daemon sockets in and outside /run, an abstract socket), then agent code
walks the whole file system it is shown, opens each planted path by name, connects to each socket and writes
where it should not. Nothing planted may be seen, and nothing may reach the host.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from tests.fixtures.sandboxes import CONFINING
from tests.fixtures.users import as_nobody
from tests.test_sandbox import make_env, run

SANDBOXES = CONFINING  # every registered sandbox that confines (tests/fixtures/sandboxes.py)
REPO = Path(__file__).resolve().parents[1]

AGENT = r'''
import json, os, socket, sys, time
mark, planted, sockets = MARK, PLANTED, SOCKETS
seen, walked, deadline = [], True, time.monotonic() + 40
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    seen += [os.path.join(root, n) for n in dirs + files if mark in n]
    if time.monotonic() > deadline:
        walked = False
        break
opened = []
for path in planted:
    try:
        with open(path, "rb") as f:
            opened.append([path, f.read(64).decode(errors="replace")])
    except OSError:
        pass
connected = []
for address in sockets:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(address.replace("@", "\0", 1) if address.startswith("@") else address)
        connected.append(address)
    except OSError:
        pass
    s.close()
written = []
targets = ("/dev/shm/", "/dev/", "/", "/var/tmp/", os.path.expanduser("~root/"))
for path in [folder + mark for folder in targets]:
    try:
        with open(path, "w") as f:
            f.write("x")
        written.append(path)
    except OSError:
        pass
try:
    shadow = open("/etc/shadow").read()
except OSError:
    shadow = ""
interfaces = sorted(name for _, name in socket.if_nameindex())
print("REPORT " + json.dumps({"walked": walked, "seen": seen, "opened": opened, "connected": connected,
                              "written": written, "shadow": shadow[:40], "interfaces": interfaces}))
'''


@pytest.fixture
def host_dir():
    """A folder outside /tmp (every sandbox gives agent code a /tmp of its own, which would hide it anyway)."""
    base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path.home()
    folder = base / f"mlab-view-{uuid.uuid4().hex[:10]}"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def plant(host_dir: Path, mark: str) -> tuple[list[str], list[str], list[socket.socket], list[Path]]:
    """Files and sockets agent code must not reach, each named with mark; also what to remove afterwards."""
    files = {
        "run/trace.json": "the run's own trace", "run/snapshots/" + mark: "a snapshot manifest",
        "run/objects/ab/" + mark: "a stored object", "other-run/workspace/" + mark: "another run's file",
        "mlab-home/tasks/np/x/hidden/" + mark: "another MLAB_HOME's answers",
        "mlab-home/llm-cache/" + mark: "a cached LLM reply", "mlab-home/llm_calls.jsonl": "a call log",
        "data-dir/house-prices/" + mark: "a --data-dir source", "secret-" + mark: "a 0600 file",
    }
    planted = []
    for rel, text in files.items():
        path = host_dir / rel.replace("trace.json", f"trace-{mark}.json").replace(
            "llm_calls.jsonl", f"llm_calls-{mark}.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{mark} {text}")
        planted.append(str(path))
    os.chmod(host_dir / f"secret-{mark}", 0o600)
    extra: list[Path] = []
    home_secret = Path.home() / f".mlab-secret-{mark}"
    home_secret.write_text(f"{mark} the harness user's 0600 file")
    os.chmod(home_secret, 0o600)
    planted.append(str(home_secret))
    extra.append(home_secret)
    servers, addresses = [], []
    for path in [str(host_dir / f"daemon-{mark}.sock")] + (
            [f"/run/mlab-{mark}.sock"] if os.path.isdir("/run") and os.access("/run", os.W_OK) else []):
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.listen(4)
        servers.append(server)
        addresses.append(path)
        extra.append(Path(path))
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0mlab-" + mark)
    abstract.listen(4)
    servers.append(abstract)
    addresses.append("@mlab-" + mark)
    return planted, addresses, servers, extra


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.slow
def test_agent_code_sees_nothing_of_the_host_and_changes_nothing(host_dir, sandbox):
    mark = uuid.uuid4().hex
    planted, addresses, servers, extra = plant(host_dir, mark)
    try:
        env = make_env(host_dir / "run", sandbox=sandbox, timeout=90.0)
        try:
            out, _error = run(env, AGENT.replace("MARK, PLANTED, SOCKETS", repr((mark, planted, addresses))))
        finally:
            env.close()
    finally:
        for server in servers:
            server.close()
    leftovers = [p for p in (f"/dev/shm/{mark}", f"/dev/{mark}", f"/{mark}", f"/var/tmp/{mark}",
                             os.path.expanduser(f"~root/{mark}")) if os.path.lexists(p)]
    for path in [*extra, *map(Path, leftovers)]:
        path.unlink(missing_ok=True)
    report = json.loads(out.split("REPORT ", 1)[1].splitlines()[0]) if "REPORT " in out else None
    assert report is not None, out
    assert report["seen"] == [], report["seen"]
    assert report["walked"], "the walk of the visible file system did not finish"
    assert report["opened"] == [], report["opened"]
    assert report["connected"] == [], report["connected"]
    assert not leftovers, leftovers  # nothing written reached the host
    assert "root:" not in report["shadow"]
    assert report["interfaces"] == ["lo"], report["interfaces"]


PACK_PROBE = r'''
import os, sys, tempfile
import mlab_example_tasks  # the harness itself imports the pack
from mlab.core.plugins.registry import load_registry
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.sandbox.local import LocalSandbox
box = LocalSandbox() if sys.argv[1] == "local" else load_registry().items["sandboxes"][sys.argv[1]]()
probe = ("import os\n"
         "try:\n"
         "    import mlab_example_tasks.line_fit; print('IMPORTED')\n"
         "except ImportError:\n"
         "    print('NO IMPORT')\n"
         "try:\n"
         "    print('READ', len(open(%r).read()))\n"
         "except OSError:\n"
         "    print('NOT READ')\n") % os.path.join(mlab_example_tasks.__path__[0], "line_fit.py")
result = box.run([sys.executable, "-c", probe], ExecSpec(cwd=tempfile.mkdtemp()))
print("PROBE", result.exit_code, result.output)
'''


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", CONFINING)
def test_an_installed_task_packs_code_is_not_there_for_agent_code(tmp_path, sandbox):
    """A pack installed normally lives in the shown Python environment: its generator and seed would rebuild
    the answers, so its code is covered (the harness itself still imports it)."""
    from tests.fixtures.venvs import EXAMPLE_PACK, make_venv
    from tests.test_sandbox import make_sandbox

    make_sandbox(sandbox)  # skips with the reason where this sandbox cannot run here
    venv = make_venv(tmp_path / "venv")
    venv.install(EXAMPLE_PACK)
    result = venv.run("-c", PACK_PROBE, sandbox)
    assert result.returncode == 0, result.stderr
    assert "PROBE 0 NO IMPORT\nNOT READ" in result.stdout, result.stdout


def test_the_local_sandbox_confines_a_harness_that_is_not_root(host_dir):
    """Run by an unprivileged user, confine.py makes a user namespace of its own and builds the same file
    system: the command is root only inside it, sees no host home, and has only a loopback."""
    import subprocess

    from mlab.core.sandbox.local import confine_program, plan_of
    from mlab.core.sandbox.rootfs import root_view
    from mlab.core.sandbox.spec import ExecSpec

    system_python, setpriv = as_nobody()
    folder = host_dir  # pytest's own tmp_path is open to root alone
    ws = folder / "ws"
    ws.mkdir()
    shutil.copy(confine_program(), folder / "confine.py")
    for path in (folder, ws):
        os.chmod(path, 0o777)
    view = root_view([system_python], ExecSpec(cwd=ws))
    # only what an unprivileged harness could itself read: the system's Python, not this test's venv
    view.late_read_only = []
    secret = Path.home() / f".mlab-view-{uuid.uuid4().hex}"
    secret.write_text("the harness user's file")
    try:
        result = subprocess.run(
            [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", system_python, "-I", "-S", "-B",
             str(folder / "confine.py"), plan_of(view), "--", system_python, "-c",
             "import os, socket; open('made.txt', 'w').write('x'); "
             f"print(os.getuid(), os.path.exists({str(secret)!r}), os.path.exists({str(REPO)!r}), "
             "sorted(n for _, n in socket.if_nameindex()))"],
            cwd=ws, capture_output=True, text=True, timeout=60)
    finally:
        secret.unlink()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "False", "False", "['lo']"], result.stdout
    assert (ws / "made.txt").stat().st_uid == 65534  # root inside is the unprivileged user outside
