"""A command is alone in its session, so the kernel's autogroup (sched_autogroup, one scheduling group per session)
gives it a group of its own. Sharing one with its init (bwrap's, or the local sandbox's), a process whose load the
kernel counts at full weight while it sleeps on another CPU, gave the command a fraction of a share: under five
busy loops on 2 cores a bwrap command's start took 26-34 ms longer, a local one 20 ms
(benchmarks/sandbox_overhead.py --load 5). The local sandbox's init is no longer the command's group leader, so
without a cgroup its freeze reaches the command through the process tree."""
from __future__ import annotations

import json
import os
import sys

import pytest

from mlab.core import ExecSpec
from mlab.core.sandbox import process, zygote
from mlab.core.sandbox.local import LocalSandbox, namespace_prefix
from mlab.core.sandbox.self_check import check_sandbox
from tests.fixtures.sandboxes import make_sandbox

SESSION = r'''
import json, os
def group(pid):
    try:
        return open(f"/proc/{pid}/autogroup").read().split()[0]
    except OSError:  # a kernel without autogroup
        return None
print(json.dumps({"leader": os.getsid(0) == os.getpid(), "parent_sid": os.getsid(os.getppid()),
                  "own": group("self"), "parent": group(os.getppid())}))
'''


@pytest.mark.parametrize("name", ["bwrap", "local", "local-fresh"])
def test_a_command_leads_a_session_and_an_autogroup_of_its_own(tmp_path, name):
    sandbox = make_sandbox(name)
    try:
        result = sandbox.run([sys.executable, "-c", SESSION], ExecSpec(cwd=tmp_path))
    finally:
        sandbox.close()
    assert result.exit_code == 0, result.output
    seen = json.loads(result.output)
    assert seen["leader"], seen
    if seen["own"] is not None and os.path.exists("/proc/self/autogroup"):
        assert seen["own"] != seen["parent"], seen


def test_a_bwrap_command_keeps_its_exit_status_and_its_signal(tmp_path):
    sandbox = make_sandbox("bwrap")
    try:
        exited = sandbox.run([sys.executable, "-c", "raise SystemExit(7)"], ExecSpec(cwd=tmp_path))
        killed = sandbox.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
                             ExecSpec(cwd=tmp_path))
        missing = sandbox.run(["/no/such/program"], ExecSpec(cwd=tmp_path))
    finally:
        sandbox.close()
    assert exited.exit_code == 7
    assert killed.exit_code == -15  # a signal, as every sandbox reports one
    assert missing.exit_code != 0 and "/no/such/program" in missing.output


@pytest.mark.slow
@pytest.mark.parametrize("zygotes", [True, False])
def test_without_a_cgroup_a_local_commands_freeze_and_kill_reach_its_whole_tree(tmp_path, monkeypatch, zygotes):
    """The command, its child and a child that made a session of its own are all stopped by freeze and killed."""
    if namespace_prefix() is None:
        pytest.skip("no namespaces here")
    monkeypatch.setattr(process.CommandCgroup, "create", staticmethod(lambda limits: None))
    monkeypatch.setattr(zygote.CommandCgroup, "create", staticmethod(lambda limits: None))
    outcomes = check_sandbox(lambda: LocalSandbox(zygotes=zygotes), tmp_path,
                             only=lambda case: case in ("freezes_between_actions", "kills_the_tree"))
    found = [(o.case, o.status) for o in outcomes]
    assert found == [("kills_the_tree", "pass"), ("freezes_between_actions", "pass")], outcomes
