"""The sandbox conformance suite (mlab.core.sandbox.self_check, `mlab check-sandbox`): every registered sandbox
passes it, so does a third-party one installed from a distribution of its own (which also joins `--sandbox auto`
by its declared rank), and sandboxes that break a rule fail it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from mlab.core.plugins.registry import load_registry
from mlab.core.sandbox.local import UnconfinedSandbox
from mlab.core.sandbox.process import ProcessSandbox
from mlab.core.sandbox.self_check import CONFINEMENT, CONTRACT, check_sandbox
from tests.fixtures.sandboxes import REGISTERED, make_sandbox
from tests.fixtures.venvs import EXAMPLE_PACK, REPO, fixture_plugin, make_venv

HOSTILE = {case.__name__ for case in CONFINEMENT}


# Slow: 7-8 s a sandbox, mostly the suite's own waits (time limits, settling). The fast tier keeps the suite's
# failing cases below and test_sandbox.py's cases of the same rules for every sandbox.
@pytest.mark.slow
@pytest.mark.parametrize("name", REGISTERED)
def test_every_registered_sandbox_passes_the_suite(name, tmp_path):
    sandbox = make_sandbox(name)  # or a skip saying why it cannot run here
    outcomes = check_sandbox(lambda: make_sandbox(name), tmp_path)
    assert [o for o in outcomes if o.status == "fail"] == []
    skipped = {o.case for o in outcomes if o.status == "skip"}
    assert skipped == (set() if sandbox.confined else HOSTILE)  # the contract part holds for every sandbox
    assert len(outcomes) == len(CONTRACT) + len(CONFINEMENT)


# ---- the suite fails what breaks a rule -------------------------------------------------------------------

class ClaimsToConfine(UnconfinedSandbox):
    """Says it confines; runs commands as plain processes."""

    name = "fixture-liar"
    confined = True


class GroupOnly(ProcessSandbox):
    """Starts each command as a plain Popen in a session of its own: its process group is all it reaches."""

    name = "fixture-group-only"

    def popen(self, argv, spec):
        return subprocess.Popen(argv, cwd=spec.cwd, env=spec.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if spec.stdin_pipe else subprocess.DEVNULL,
                                start_new_session=True)

    def kill(self, command):
        os.killpg(command.pid, signal.SIGKILL)

    def freeze(self, command):
        os.killpg(command.pid, signal.SIGSTOP)

    def thaw(self, command):
        os.killpg(command.pid, signal.SIGCONT)


def test_a_sandbox_that_says_it_confines_and_does_not_fails_every_hostile_case(tmp_path):
    outcomes = check_sandbox(ClaimsToConfine, tmp_path, only=HOSTILE.__contains__)
    assert {o.case: o.status for o in outcomes} == dict.fromkeys(HOSTILE, "fail")
    details = {o.case: o.detail for o in outcomes}
    assert "hidden file was seen" in details["hides_hidden_paths"]
    assert "read-only file was changed" in details["protects_read_only_paths"]
    assert "loopback" in details["no_network"]


@pytest.fixture
def strays(tmp_path):
    """Kills, at the end, what a broken sandbox left running in tmp_path."""
    yield tmp_path
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.readlink(f"/proc/{name}/cwd").startswith(str(tmp_path)):
                os.kill(int(name), signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow
def test_a_sandbox_that_misses_what_left_the_process_group_fails_the_kill_and_freeze_cases(strays):
    outcomes = check_sandbox(GroupOnly, strays, only={"kills_the_tree", "freezes_between_actions"}.__contains__)
    assert {o.case: o.status for o in outcomes} == {"kills_the_tree": "fail", "freezes_between_actions": "fail"}
    assert all(o.detail.endswith(": escaped.beat") for o in outcomes), outcomes  # the group's child was reached


# ---- a non-confining sandbox under any name is marked as such -------------------------------------------

def test_a_run_in_a_sandbox_that_does_not_confine_is_recorded_and_reported_so(tmp_path):
    """Whether a run was confined is the sandbox's own `confined`, whatever its name: the trace records it
    and the report lists the run among the unconfined."""
    from mlab.core import RunConfig
    from mlab.core.bench.report import ReportData
    from mlab.core.run.harness import Harness
    from mlab.core.run.runner import Runner
    from tests.fixtures.harness import AGENT_NAME, TASK_NAME, fixture_registry

    class Open(UnconfinedSandbox):
        name = "fixture-open"

    registry = fixture_registry()
    registry.items["sandboxes"]["fixture-open"] = Open
    config = RunConfig(task=TASK_NAME, agent=AGENT_NAME, sandbox="fixture-open", agent_options={"steps": 2})
    trace = Runner(tmp_path / "run", config, registry, warn=lambda _said: None).start()
    assert trace.status == "finished" and trace.config.sandbox_confined is False
    rows = [{"key": "open-run", "config": trace.config.model_dump_json()},
            {"key": "old-run", "config": json.dumps({"sandbox": "fixture-open"})}]  # before the field: not known
    assert ReportData.unconfined_runs.fget(type("Data", (), {"rows": rows})) == ["open-run"]
    assert Harness(registry, sandbox="fixture-open").sandbox_confined is False


# ---- a third-party sandbox ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    bwrap = load_registry().items["sandboxes"].get("bwrap")
    if bwrap is None or not bwrap.available()[0]:
        pytest.skip("the fixture sandbox runs bubblewrap, which cannot run here")
    venv = make_venv(tmp_path_factory.mktemp("third-party-sandbox") / "venv")
    venv.install(EXAMPLE_PACK, fixture_plugin("sandbox"))
    return venv


@pytest.mark.slow
def test_a_third_party_sandbox_passes_the_suite_from_the_cli(venv):
    done = venv.mlab("check-sandbox", "fixture-box", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["PASS"] * (len(CONTRACT) + len(CONFINEMENT)), done.stdout
    assert lines[-1] == f"sandbox fixture-box: {len(lines) - 1} of {len(lines) - 1} cases pass or do not apply"


@pytest.mark.slow
def test_a_third_party_sandbox_joins_auto_by_its_rank(venv, tmp_path):
    def auto_run(name: str, **env: str) -> dict:
        run_dir = tmp_path / name
        done = venv.mlab("run", "--task", "example/line-fit", "--agent", "baseline", "--run-dir", str(run_dir),
                         env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        config: dict = json.loads((run_dir / "trace.json").read_text())["config"]
        return config

    config = auto_run("ranked-first")
    assert (config["sandbox"], config["sandbox_confined"]) == ("fixture-box", True)
    config = auto_run("unavailable", MLAB_FIXTURE_BOX="off")  # then the next by rank, whichever works here
    assert config["sandbox"] != "fixture-box" and config["sandbox_confined"] is True
    done = venv.mlab("check-sandbox", "fixture-box", env={"MLAB_FIXTURE_BOX": "off"})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("mlab: error: sandbox 'fixture-box' is not available here: turned off by "
                           "MLAB_FIXTURE_BOX=off\n")


def test_check_sandbox_with_an_unknown_name_says_so_in_one_line():
    done = subprocess.run([sys.executable, "-m", "mlab.cli.main", "check-sandbox", "no-such-box"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("mlab: error: unknown sandbox 'no-such-box'; valid: ")
    assert done.stderr.count("\n") == 1
