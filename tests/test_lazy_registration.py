"""Registration by name (mlab.core.Lazy) and the entry-point scan behind `mlab list-plugins`, with a real plugin
pip-installed into a throwaway venv: what is listed without importing it, what happens when it is used, and that
the scan finds exactly what importlib.metadata finds."""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.fixtures.venvs import EXAMPLE_PACK, fixture_plugin, make_venv  # noqa: E402

PYPROJECT = ('[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
             '[project]\nname = "mlab-lazykit"\nversion = "0.3.1"\ndependencies = ["mlab"]\n'
             '[project.entry-points.mlab]\nlazykit = "mlab_lazykit"\n[tool.setuptools]\npackages = ["mlab_lazykit"]\n')
REGISTRATION = '''from mlab.core import Lazy, hookimpl

@hookimpl
def register_tasks(register):
    register(Lazy("lazykit/good", "mlab_lazykit.bodies:GoodTask"))
    register(Lazy("lazykit/missing", "mlab_lazykit.nowhere:Task"))
    register(Lazy("lazykit/misnamed", "mlab_lazykit.bodies:GoodTask"))

@hookimpl
def register_agents(register):
    register(Lazy("lazy-echo", "mlab_lazykit.bodies:EchoAgent"))
    register(Lazy("lazy-typo", "mlab_lazykit.bodies EchoAgent"))
'''
BODIES = '''from mlab.core import Action, Agent, Metric, Task

class GoodTask(Task):
    name = "lazykit/good"
    description = "a task that loads"
    research_problem = "nothing to do"
    metric = Metric(name="score", higher_is_better=True)

    def prepare(self, ctx):
        (ctx.public_dir / "train.py").write_text("print('nothing')\\n")

    def evaluate(self, workspace, hidden_dir):
        return 1.0

class EchoAgent(Agent):
    name = "lazy-echo"
    description = "an agent that loads"
    needs_llm = False

    def step(self, state):
        return Action(name="Final Answer", args={"final_answer": "done"})
'''


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv with a plugin registering by name (some registrations broken) and two eager plugins."""
    root = tmp_path_factory.mktemp("lazy")
    source = root / "lazykit"
    (source / "mlab_lazykit").mkdir(parents=True)
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "mlab_lazykit" / "__init__.py").write_text(REGISTRATION)
    (source / "mlab_lazykit" / "bodies.py").write_text(BODIES)
    venv = make_venv(root / "venv")
    venv.install(source, EXAMPLE_PACK, fixture_plugin("kit"))
    return venv


@pytest.mark.slow
def test_listing_shows_what_is_registered_by_name_without_importing_it(venv):
    plugin = venv.plugins()["lazykit"]
    assert plugin["distribution"] == "mlab-lazykit" and plugin["version"] == "0.3.1"
    # Declared names are listed as registered: nothing was imported to check them.
    assert plugin["tasks"] == ["lazykit/good", "lazykit/missing", "lazykit/misnamed"]
    assert plugin["agents"] == ["lazy-echo"]
    # A declaration that is malformed in itself is refused at registration, as an eager object would be.
    assert "invalid registration" in plugin["error"] and "'mlab_lazykit.bodies EchoAgent'" in plugin["error"]
    probe = ("import sys\nfrom mlab.core.plugins.registry import load_registry\nr = load_registry()\n"
             "assert 'lazykit/good' in r.items['tasks'] and not r.items['tasks'].is_loaded('lazykit/good')\n"
             "print(sorted(m for m in sys.modules if m.startswith('mlab_lazykit') or m == 'mlab.core.task'))")
    result = venv.run("-c", probe)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["['mlab_lazykit']"]


@pytest.mark.slow
def test_an_object_that_fails_to_load_is_its_plugins_error_and_hides_nothing_else(venv):
    result = venv.mlab("tasks", "--json")
    assert result.returncode == 0, result.stderr
    names = {row["name"] for row in json.loads(result.stdout)}
    assert "lazykit/good" in names and "example/line-fit" in names and "lite/digits" in names, result.stderr
    assert not names & {"lazykit/missing", "lazykit/misnamed"}
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: plugin lazykit")]
    assert len(errors) == 1, result.stderr
    assert ("task 'lazykit/missing' of plugin lazykit cannot be loaded: loading mlab_lazykit.nowhere:Task "
            "failed: ModuleNotFoundError") in errors[0]
    assert ("task 'lazykit/misnamed' of plugin lazykit cannot be loaded: registered as 'lazykit/misnamed', but "
            "mlab_lazykit.bodies:GoodTask is named 'lazykit/good'") in errors[0]


@pytest.mark.slow
def test_using_an_object_that_fails_to_load_is_a_one_line_error(venv):
    result = venv.mlab("data", "lazykit/missing")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "task 'lazykit/missing' of plugin lazykit cannot be loaded" in result.stderr
    # Asked for again in the same process (by its short name too), the answer is the same line.
    probe = ("from mlab.core.plugins.registry import LoadError, load_registry\nr = load_registry()\n"
             "for name in ('lazykit/missing', 'missing', 'lazykit/missing'):\n"
             "    try:\n        r.get('tasks', name)\n    except LoadError as exc:\n        print(exc)\n")
    again = venv.run("-c", probe)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert len(lines) == 3 and len(set(lines)) == 1 and "cannot be loaded" in lines[0]


@pytest.mark.slow
def test_an_object_registered_by_name_runs(venv, tmp_path):
    result = venv.mlab("agents", "--json")
    assert result.returncode == 0, result.stderr
    echo = next(row for row in json.loads(result.stdout) if row["name"] == "lazy-echo")
    assert echo["description"] == "an agent that loads" and echo["provider"] == "mlab-lazykit 0.3.1"
    run = venv.mlab("run", "--task", "example/line-fit", "--agent", "lazy-echo", "--run-dir", str(tmp_path / "run"),
                    "--sandbox", "unconfined", timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["steps"][-1]["action"]["name"] == "Final Answer"


# ---- the entry-point scan -------------------------------------------------------------------------------------
SCAN = ("import json\nfrom importlib.metadata import version\n"
        "from mlab.core.plugins.discovery import distribution_version, entry_points, metadata_entry_points\n"
        "print(json.dumps({'scan': [list(e) for e in entry_points('mlab')],\n"
        "                  'metadata': [list(e) for e in metadata_entry_points('mlab')],\n"
        "                  'versions': [distribution_version('mlab'), version('mlab'),\n"
        "                               distribution_version('mlab-lazykit'), version('mlab-lazykit'),\n"
        "                               distribution_version('no-such-distribution')]}))")


@pytest.mark.slow
def test_the_scan_finds_what_importlib_metadata_finds(venv):
    found = json.loads(venv.run("-c", SCAN).stdout)
    assert found["scan"] == found["metadata"]
    names = [name for name, *_rest in found["scan"]]
    assert {"lazykit", "example", "fixture-kit", "lite", "research"} <= set(names)
    assert ["lazykit", "mlab_lazykit", "mlab-lazykit", "0.3.1"] in found["scan"]
    assert found["versions"][:2] == [found["versions"][1]] * 2 and found["versions"][2:] == ["0.3.1", "0.3.1", None]


def test_the_scan_agrees_in_the_main_environment_from_the_repository(monkeypatch):
    from importlib.metadata import version

    from mlab.core.plugins import discovery

    monkeypatch.chdir(REPO)  # where a stale mlab.egg-info may sit first on sys.path, as for `python -m mlab...`
    monkeypatch.syspath_prepend("")
    assert discovery.entry_points("mlab") == discovery.metadata_entry_points("mlab")
    assert discovery.distribution_version("mlab") == version("mlab")


def test_a_zip_on_sys_path_is_left_to_importlib_metadata(tmp_path, monkeypatch):
    from mlab.core.plugins import discovery

    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("mlab_zipped-1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: mlab-zipped\nVersion: 1.2\n")
        z.writestr("mlab_zipped-1.2.dist-info/entry_points.txt", "[mlab]\nzipped = mlab_zipped\n")
    monkeypatch.syspath_prepend(str(archive))
    found = discovery.entry_points("mlab")
    assert discovery.EntryPoint("zipped", "mlab_zipped", "mlab-zipped", "1.2") in found
    assert found == discovery.metadata_entry_points("mlab")
    assert discovery.distribution_version("mlab-zipped") == "1.2"
