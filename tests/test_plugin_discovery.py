"""Plugin discovery with real distributions: pip install, `mlab list-plugins`, a run, pip uninstall, and every
way a plugin can be broken without breaking the others."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.fixtures.venvs import EXAMPLE_PACK, MAIN_PYTHON, fixture_plugin, make_venv  # noqa: E402

EXAMPLE = ("example", "mlab-example-tasks", "0.1.0", "example/line-fit")
HEAVY = ("torch", "sklearn", "litellm")
BROKEN_FIXTURES = ("broken_import", "invalid_registration", "dup_a", "dup_b", "misspelled_hook")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """One venv holding the example pack and every broken fixture plugin at once, as a user's machine might,
    and a pack `np` made here whose task names break the PACK/NAME rule."""
    root = tmp_path_factory.mktemp("zoo")
    venv = make_venv(root / "venv")
    venv.install(EXAMPLE_PACK, *(fixture_plugin(name) for name in BROKEN_FIXTURES), _badly_named_pack(root / "np"),
                 _misspelled_argument_plugin(root / "argtypo"))
    return venv


def _misspelled_argument_plugin(root: Path) -> Path:
    """A plugin whose hook implementation names an argument the hook does not have (registr)."""
    (root / "mlab_argtypo").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "mlab-argtypo"\nversion = "0.1.0"\ndependencies = ["mlab"]\n'
        '[project.entry-points.mlab]\nargtypo = "mlab_argtypo"\n[tool.setuptools]\npackages = ["mlab_argtypo"]\n')
    (root / "mlab_argtypo" / "__init__.py").write_text(
        "from mlab.core import hookimpl\n\n@hookimpl\ndef register_agents(registr):\n    pass\n")
    return root


def _badly_named_pack(root: Path) -> Path:
    (root / "mlab_np").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "mlab-np"\nversion = "0.1.0"\ndependencies = ["mlab"]\n'
        '[project.entry-points.mlab]\nnp = "mlab_np"\n[tool.setuptools]\npackages = ["mlab_np"]\n')
    (root / "mlab_np" / "__init__.py").write_text(
        "from mlab.core import Metric, Task, hookimpl\n\n"
        "class Named(Task):\n"
        "    description = 'a task with a name'\n"
        "    research_problem = 'none'\n"
        "    metric = Metric(name='score', higher_is_better=True)\n"
        "    def __init__(self, name):\n"
        "        self.name = name\n"
        "    def prepare(self, ctx):\n"
        "        pass\n"
        "    def evaluate(self, workspace, hidden_dir):\n"
        "        return 1.0\n\n"
        "@hookimpl\n"
        "def register_tasks(register):\n"
        "    for name in ('NoSlash', 'np/Bad Name', 'np/../../etc', 'np/double--hyphen', 'np/fine-2'):\n"
        "        register(Named(name))\n")
    return root


def table_row(output: str, plugin: str) -> str:
    rows = [line for line in output.splitlines() if re.match(rf"^\W*{re.escape(plugin)}\s", line)]
    assert len(rows) == 1, f"no single row for {plugin!r} in:\n{output}"
    return rows[0]


# ---- the example pack --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_example_pack_installs_lists_runs_and_uninstalls(tmp_path):
    name, dist, version, task = EXAMPLE
    venv = make_venv(tmp_path / "venv")
    assert name not in venv.plugins()

    venv.install(EXAMPLE_PACK)
    listed = venv.mlab("list-plugins")
    assert listed.returncode == 0, listed.stderr
    row = table_row(listed.stdout, name)
    for text in (dist, version, task, "register_tasks"):
        assert text in row
    info = venv.plugins()[name]
    assert (info["distribution"], info["version"], info["module"]) == (dist, version, "mlab_example_tasks")
    assert info["tasks"] == [task] and info["hooks"] == ["register_tasks"] and info["error"] is None

    run_dir = tmp_path / "run"
    result = venv.mlab("run", "--task", task, "--agent", "baseline", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["end_reason"] == "final answer"
    assert [s["action"]["name"] for s in trace["steps"]] == ["Execute Script", "Final Answer"]
    assert trace["final_score_error"] is None
    assert math.isfinite(trace["final_score"]) and 0 < trace["final_score"] < 100
    assert trace["plugin_versions"][dist] == version
    assert f"final MSE: {trace['final_score']:.6g}" in result.stdout
    # The answers never reached the workspace; the data stayed as prepared.
    workspace = run_dir / "workspace"
    assert not (workspace / "answers.csv").exists()
    assert (workspace / "train.csv").read_bytes() == (venv.home / "tasks" / "example__line-fit" / "public" /
                                                      "train.csv").read_bytes()

    venv.uninstall(dist)
    assert name not in venv.plugins()
    gone = venv.mlab("run", "--task", task, "--agent", "baseline", "--run-dir", str(tmp_path / "run2"))
    assert gone.returncode == 2
    assert f"unknown task '{task}'" in gone.stderr and "Traceback" not in gone.stderr


@pytest.mark.slow
def test_example_pack_own_tests_pass(zoo):
    # The tests the example ships for its authors run green against the installed pack.
    copy = zoo.copy_of(EXAMPLE_PACK)
    result = zoo.run("-m", "pytest", "-q", "-p", "no:cacheprovider", str(copy / "tests"), cwd=copy, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\d+ passed", result.stdout)


@pytest.mark.slow
def test_example_task_is_offered_with_its_metric(zoo):
    rows = {row["name"]: row for row in zoo.mlab_json("tasks")}
    row = rows["example/line-fit"]
    assert (row["metric"], row["direction"], row["offline_ready"], row["gpu"]) == ("MSE", "lower", True, "none")
    assert row["provider"] == "mlab-example-tasks 0.1.0"


# ---- broken plugins ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_plugin_whose_import_raises_is_listed_with_its_error(zoo):
    info = zoo.plugins()["fixture-broken"]
    assert (info["distribution"], info["version"]) == ("mlab-fixture-broken-import", "0.3.1")
    assert info["error"] == "import failed: RuntimeError: fixture plugin refuses to import"
    assert info["hooks"] == [] and info["tasks"] == []
    row = table_row(zoo.mlab("list-plugins").stdout, "fixture-broken")
    for text in ("mlab-fixture-broken-import", "0.3.1", "fixture plugin refuses to import"):
        assert text in row
    # Everything else still works.
    tasks = zoo.mlab("tasks")
    assert tasks.returncode == 0 and "example/line-fit" in tasks.stdout
    agents = zoo.mlab_json("agents")
    assert "baseline" in {a["name"] for a in agents}


@pytest.mark.slow
def test_plugin_registering_an_invalid_object_is_reported(zoo):
    plugins = zoo.plugins()
    info = plugins["fixture-invalid"]
    assert (info["distribution"], info["version"]) == ("mlab-fixture-invalid", "0.1.0")
    assert "invalid registration" in info["error"] and "not a Task instance" in info["error"]
    assert info["tasks"] == []
    assert plugins["example"]["error"] is None and plugins["example"]["tasks"] == ["example/line-fit"]
    assert "fixture/not-a-task" not in {t["name"] for t in zoo.mlab_json("tasks")}


@pytest.mark.slow
def test_two_plugins_registering_one_agent_name_fail_loudly(zoo, tmp_path):
    conflicts = [c for c in zoo.plugins()[None] if "'fixture-dup'" in c]
    assert len(conflicts) == 1
    assert "mlab-fixture-dup-a 1.0.0" in conflicts[0] and "mlab-fixture-dup-b 2.0.0" in conflicts[0]
    plugins = zoo.plugins()
    dup_infos = [p for name, p in plugins.items() if name and name.startswith("fixture-dup")]
    assert len(dup_infos) == 2 and all("registered twice" in (p["error"] or "") for p in dup_infos)
    assert "conflict:" in zoo.mlab("list-plugins").stdout

    result = zoo.mlab("run", "--task", "line-fit", "--agent", "fixture-dup", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2, result
    assert "mlab-fixture-dup-a" in result.stderr and "mlab-fixture-dup-b" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
    # Listing agents still works, and says loudly that the name is contested, in the table and in --json.
    agents = zoo.mlab("agents")
    assert agents.returncode == 0 and "baseline" in agents.stdout
    assert "conflict:" in agents.stderr and "fixture-dup" in agents.stderr and "mlab-fixture-dup-b" in agents.stderr
    listed = zoo.mlab("agents", "--json")
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert "mlab-fixture-dup-b" in rows["fixture-dup"]["conflict"] and rows["baseline"]["conflict"] is None
    assert "conflict:" in listed.stderr


@pytest.mark.slow
def test_a_pack_cannot_claim_another_packs_task(zoo):
    info = zoo.plugins()["fixture-dup-b"]
    assert "'lite/digits' is outside its pack" in info["error"] and "'fixture-dup-b/...'" in info["error"]
    rows = {row["name"]: row for row in zoo.mlab_json("tasks")}
    assert rows["lite/digits"]["provider"].startswith("mlab-tasks-lite") and rows["lite/digits"]["conflict"] is None
    assert rows["fixture-dup-a/own"]["provider"] == "mlab-fixture-dup-a 1.0.0"
    # the refused claim is shown by every listing, --json included
    for argv in (("tasks",), ("tasks", "--json"), ("agents", "--json")):
        assert "outside its pack" in zoo.mlab(*argv).stderr, argv


@pytest.mark.slow
def test_task_names_are_pack_slash_name(zoo):
    error = zoo.plugins()["np"]["error"]
    for bad in ("'NoSlash'", "'np/Bad Name'", "'np/../../etc'", "'np/double--hyphen'"):
        assert f"task name {bad} is not PACK/NAME" in error, bad
    assert [t["name"] for t in zoo.mlab_json("tasks") if t["name"].startswith("np")] == ["np/fine-2"]


@pytest.mark.slow
def test_unknown_task_names_the_plugins_that_failed_to_load(zoo):
    result = zoo.mlab("prepare", "no-such-task")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "unknown task 'no-such-task'" in result.stderr and "failed to load" in result.stderr
    assert "fixture-broken (mlab-fixture-broken-import)" in result.stderr
    assert "fixture-misspelled (mlab-fixture-misspelled)" in result.stderr


@pytest.mark.slow
def test_misspelled_hookimpl_is_reported_by_check_pending(zoo):
    info = zoo.plugins()["fixture-misspelled"]
    assert info["distribution"] == "mlab-fixture-misspelled"
    assert info["error"].startswith("invalid hook implementation")
    assert "unknown hook 'register_task' (did you mean 'register_tasks'?)" in info["error"]
    typo = zoo.plugins()["argtypo"]["error"]
    assert typo == ("invalid hook implementation: register_agents() takes no argument 'registr' (did you mean "
                    "'register'?); its arguments: register")
    assert info["hooks"] == [] and info["tasks"] == []
    assert "fixture/never" not in {t["name"] for t in zoo.mlab_json("tasks")}


@pytest.mark.slow
def test_broken_plugins_do_not_stop_a_run(zoo, tmp_path):
    run_dir = tmp_path / "run"
    result = zoo.mlab("run", "--task", "line-fit", "--agent", "baseline", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((run_dir / "trace.json").read_text())["final_score"] > 0


# ---- MLAB_LOAD_PLUGINS ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_load_plugins_empty_loads_nothing(zoo):
    env = {"MLAB_LOAD_PLUGINS": ""}
    plugins = zoo.plugins(env=env)
    assert plugins == {None: []}
    assert zoo.mlab_json("tasks", env=env) == []
    assert zoo.mlab_json("agents", env=env) == []
    result = zoo.mlab("run", "--task", "example/line-fit", env=env)
    assert result.returncode == 2 and "(none installed)" in result.stderr


@pytest.mark.slow
def test_load_plugins_limits_loading_to_the_names_given(zoo):
    env = {"MLAB_LOAD_PLUGINS": "example, baseline"}
    plugins = zoo.plugins(env=env)
    assert sorted(k for k in plugins if k) == ["baseline", "example"]
    assert plugins[None] == []  # the duplicate fixtures were not loaded, so nothing conflicts
    assert all(p["error"] is None for k, p in plugins.items() if k)
    assert [t["name"] for t in zoo.mlab_json("tasks", env=env)] == ["example/line-fit"]

    only_broken = zoo.plugins(env={"MLAB_LOAD_PLUGINS": "fixture-broken"})
    assert sorted(k for k in only_broken if k) == ["fixture-broken"]
    assert "RuntimeError" in only_broken["fixture-broken"]["error"]


@pytest.mark.slow
def test_load_plugins_naming_an_unknown_plugin_is_an_error(zoo):
    for command in (("list-plugins",), ("tasks", "--json"), ("run", "--task", "example/line-fit")):
        result = zoo.mlab(*command, env={"MLAB_LOAD_PLUGINS": "example, exampel, baseline"})
        assert result.returncode == 2, (command, result.stdout + result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("mlab: error: MLAB_LOAD_PLUGINS names 'exampel', which is not installed")
        assert "(did you mean 'example'?)" in line and "fixture-broken" in line  # the installed ones, listed


# ---- cheap listing ------------------------------------------------------------------------------------------

def test_list_plugins_imports_nothing_heavy():
    # In the main .venv, with every built-in plugin installed: listing must not pay for torch, sklearn or litellm.
    result = subprocess.run([MAIN_PYTHON, "-X", "importtime", "-m", "mlab.cli.main", "list-plugins", "--json"],
                            capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["plugins"], "no plugins installed in the main .venv"
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "mlab" in imported
    assert not imported & set(HEAVY), f"list-plugins imported {sorted(imported & set(HEAVY))}"

    probe = ("import json, sys\n"
             "from mlab.core.plugins.registry import load_registry\n"
             "registry = load_registry()\n"
             "assert registry.plugins\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n")
    loaded = subprocess.run([MAIN_PYTHON, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout) == []


# ---- the built-in plugin ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_local_sandbox_is_a_builtin_plugin_that_mlab_load_plugins_governs(zoo, tmp_path):
    info = zoo.plugins()["local"]
    assert (info["distribution"], info["module"]) == ("mlab", "mlab.core.plugins.builtin")
    assert info["hooks"] == ["register_sandboxes"] and info["sandboxes"] == ["local", "unconfined"]
    assert info["error"] is None
    row = table_row(zoo.mlab("list-plugins").stdout, "local")
    for text in ("mlab", info["version"], "sandboxes: local, unconfined", "register_sandboxes"):
        assert text in row

    # Left out of MLAB_LOAD_PLUGINS, the local sandbox is not there, and the error says why.
    left_out = {"MLAB_LOAD_PLUGINS": "example, baseline"}
    assert "local" not in zoo.plugins(env=left_out)
    result = zoo.mlab("run", "--task", "example/line-fit", "--agent", "baseline", "--sandbox", "local",
                      "--run-dir", str(tmp_path / "run"), env=left_out)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "unknown sandbox 'local'" in result.stderr and "MLAB_LOAD_PLUGINS='example, baseline'" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()

    named = {"MLAB_LOAD_PLUGINS": "example,baseline,local"}
    result = zoo.mlab("run", "--task", "example/line-fit", "--agent", "baseline", "--sandbox", "local",
                      "--run-dir", str(tmp_path / "run2"), env=named)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- hook ordering and wrappers -----------------------------------------------------------------------------

ORDER_PLUGINS = {
    # entry-point name: (hookimpl options, what its register_sandboxes does)
    "order-early": ("tryfirst=True", "register(make('order-early'))"),
    "order-late": ("trylast=True", "register(make('order-late'))"),
    "order-plain": ("", "register(make('order-plain'))"),
    "order-broken": ("", "raise RuntimeError('order-broken refuses')"),
}
ORDER_COMMON = '''
from mlab.core import Sandbox, hookimpl

CALLS = []


def make(name):
    return type(name, (Sandbox,), {"name": name, "popen": lambda self, argv, spec: None})
'''
ORDER_WRAPPER = '''
from mlab_fixture_order import CALLS, hookimpl


@hookimpl(wrapper=True)
def register_sandboxes(register):
    CALLS.append("wrap:before")
    try:
        return (yield)
    except Exception as exc:
        CALLS.append(f"wrap:saw {type(exc).__name__}")
        raise
    finally:
        CALLS.append("wrap:after")
'''


def order_fixture(site: Path) -> Path:
    """An installed distribution (package and .dist-info) in folder site, with one plugin per ORDER_PLUGINS entry
    and one plugin that only wraps the hook. No pip: a folder on sys.path is all entry-point discovery needs."""
    package = site / "mlab_fixture_order"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(ORDER_COMMON)
    entry_points = {"order-wrap": "mlab_fixture_order.wrap"}
    (package / "wrap.py").write_text(ORDER_WRAPPER)
    for name, (options, body) in ORDER_PLUGINS.items():
        module = name.replace("-", "_")
        (package / f"{module}.py").write_text(
            "from mlab_fixture_order import CALLS, hookimpl, make\n\n\n"
            f"@hookimpl({options})\ndef register_sandboxes(register):\n"
            f"    CALLS.append({name!r})\n    {body}\n")
        entry_points[name] = f"mlab_fixture_order.{module}"
    dist_info = site / "mlab_fixture_order-0.1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: mlab-fixture-order\nVersion: 0.1.0\n")
    (dist_info / "entry_points.txt").write_text(
        "[mlab]\n" + "".join(f"{name} = {value}\n" for name, value in sorted(entry_points.items())))
    return site


def test_registration_hooks_honour_tryfirst_trylast_and_wrappers(tmp_path):
    site = order_fixture(tmp_path / "site")
    probe = ("import json\nfrom mlab.core.plugins.registry import load_registry\nfrom mlab_fixture_order import CALLS\n"
             "registry = load_registry()\n"
             "print(json.dumps({'calls': CALLS, 'sandboxes': list(registry.items['sandboxes']),\n"
             "                  'errors': {p.name: p.error for p in registry.plugins}}))\n")
    loaded = ",".join(["local", "order-wrap", *ORDER_PLUGINS])
    result = subprocess.run([MAIN_PYTHON, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(site), "MLAB_LOAD_PLUGINS": loaded})
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    # pluggy's order: tryfirst, then the others last registered first (built-in `local` was registered first),
    # then trylast; the wrapper wraps each plugin's call and sees the exception of the broken one.
    assert seen["calls"] == ["wrap:before", "order-early", "wrap:after",
                             "wrap:before", "order-plain", "wrap:after",
                             "wrap:before", "order-broken", "wrap:saw RuntimeError", "wrap:after",
                             "wrap:before", "wrap:after",  # local
                             "wrap:before", "order-late", "wrap:after"]
    assert seen["sandboxes"] == ["order-early", "order-plain", "local", "unconfined", "order-late"]
    # The broken plugin's error is its own; every other plugin registered what it had.
    assert seen["errors"].pop("order-broken") == "register_sandboxes raised RuntimeError: order-broken refuses"
    assert set(seen["errors"].values()) == {None}
