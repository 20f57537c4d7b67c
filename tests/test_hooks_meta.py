"""Meta-tests over core/hookspecs.py: every hook is documented, described in CONTRIBUTING.md with its signature and
exercised by a test; and the lifecycle hooks really fire, in order, during real runs."""
from __future__ import annotations

import ast
import inspect
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from mlab.core import hookspecs  # noqa: E402
from mlab.core.plugins.registry import load_registry  # noqa: E402
from tests.fixtures.venvs import EXAMPLE_PACK, fixture_plugin, make_venv  # noqa: E402

CONTRIBUTING = REPO / "CONTRIBUTING.md"
# Where hook implementations may live: the fixture plugins, the example pack and the shipped plugins.
IMPLEMENTATION_ROOTS = (REPO / "tests" / "fixtures" / "plugins", REPO / "examples", REPO / "plugins")
# The tests below that only look at names; they must not count as exercising a hook.
META_TESTS = {"test_every_hookspec_has_a_docstring", "test_every_hookspec_is_documented_with_its_signature",
              "test_every_hookspec_is_exercised"}
LIFECYCLE = ("run_started", "step_finished", "run_finished")
TASK_HOOKS = ("task_prepared", "baseline_measured", "submission_scored")


def hookspecs_by_name() -> dict[str, object]:
    specs = {name: fn for name, fn in vars(hookspecs).items()
             if callable(fn) and getattr(fn, f"{hookspecs.PROJECT}_spec", None) is not None}
    assert len(specs) >= 8, f"found only {sorted(specs)} in core/hookspecs.py"
    return specs


def signature_text(name: str, fn) -> str:
    """E.g. `run_started(event: RunStarted) -> None`, as written in the spec (annotations are strings there)."""
    sig = inspect.signature(fn)

    def show(annotation) -> str:
        return annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))

    params = ", ".join(f"{p.name}: {show(p.annotation)}" for p in sig.parameters.values())
    return f"{name}({params}) -> {show(sig.return_annotation)}"


def hooks_section() -> str:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    match = re.search(r"^## Hooks\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, "CONTRIBUTING.md has no '## Hooks' section"
    return match.group(1)


# ---- meta-tests ----------------------------------------------------------------------------------------------

def test_every_hookspec_has_a_docstring():
    for name, fn in hookspecs_by_name().items():
        doc = inspect.getdoc(fn)
        assert doc and len(doc.split()) >= 4, f"hookspec {name} has no real docstring"


def test_every_hookspec_is_documented_with_its_signature():
    section = hooks_section()
    specs = hookspecs_by_name()
    for name, fn in specs.items():
        heading = f"### `{signature_text(name, fn)}`"
        assert heading in section.splitlines(), f"CONTRIBUTING.md's Hooks section lacks the heading {heading}"
        body = section.split(heading, 1)[1].split("\n### ", 1)[0]
        assert len(body.split()) >= 15, f"the documentation of {name} does not say when it is called"
    documented = re.findall(r"^### `(\w+)\(", section, re.M)
    assert sorted(documented) == sorted(specs), "the Hooks section documents hooks that do not exist"


@pytest.mark.slow
def test_every_hookspec_is_exercised():
    implemented = "\n".join(path.read_text(encoding="utf-8") for root in IMPLEMENTATION_ROOTS if root.is_dir()
                            for path in root.rglob("*.py"))
    tests = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a test file being edited right now; pytest reports it on its own
            continue
        lines = source.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and node.name not in META_TESTS:
                # the def's lines (ast.get_source_segment splits the whole file again for each function: seconds)
                tests.append("\n".join(lines[node.lineno - 1:node.end_lineno]))
    for name in hookspecs_by_name():
        assert re.search(rf"@hookimpl\s*\ndef {name}\(", implemented), f"no plugin or fixture implements {name}"
        used = re.compile(rf"\b{name}\b")
        assert any(used.search(test) for test in tests), f"no test exercises hook {name}"


# ---- lifecycle hooks in real runs ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    venv = make_venv(tmp_path_factory.mktemp("hooks") / "venv")
    venv.install(EXAMPLE_PACK, fixture_plugin("observer"), fixture_plugin("kit"))
    return venv


def run_observed(venv, tmp_path, *args, **env):
    events_file = tmp_path / "events.jsonl"
    run_dir = tmp_path / "run"
    result = venv.mlab("run", "--task", "example/line-fit", "--run-dir", str(run_dir), *args,
                       env={"MLAB_FIXTURE_EVENTS": str(events_file), **env})
    assert result.returncode == 0, result.stdout + result.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    return run_dir.resolve(), trace, events


@pytest.mark.slow
def test_observer_plugin_is_discovered_with_its_hooks(venv):
    plugins = {p["name"]: p for p in venv.mlab_json("list-plugins")["plugins"]}
    assert plugins["fixture-observer"]["error"] is None
    assert plugins["fixture-observer"]["hooks"] == sorted(["llm_call_finished", *LIFECYCLE, *TASK_HOOKS])
    kit = plugins["fixture-kit"]
    assert kit["error"] is None
    assert kit["hooks"] == ["register_agents", "register_llms", "register_sandboxes"]
    assert (kit["agents"], kit["llms"], kit["sandboxes"]) == (["fixture-asker"], ["fixture-echo"], ["fixture-plain"])


@pytest.mark.slow
def test_lifecycle_hooks_fire_in_order_during_a_run(venv, tmp_path):
    run_dir, trace, events = run_observed(venv, tmp_path, "--agent", "baseline")
    assert [e["hook"] for e in events] == ["run_started", "step_finished", "step_finished", "run_finished"]
    assert {e["event"]["run_dir"] for e in events} == {str(run_dir)}

    started = events[0]
    assert started["event"]["config"]["task"] == "example/line-fit"
    assert started["event"]["config"]["agent"] == "baseline"
    assert started["event"]["resumed_from_step"] == 0
    assert started["trace"] == {"steps": 0, "status": "running", "final_score": None}

    steps = [e for e in events if e["hook"] == "step_finished"]
    assert [s["event"]["step"]["index"] for s in steps] == [1, 2]
    assert [s["event"]["step"]["action"]["name"] for s in steps] == ["Execute Script", "Final Answer"]
    assert "train MSE" in steps[0]["event"]["step"]["observation"]
    # Each step was in trace.json before observers were told about it.
    assert [s["trace"]["steps"] for s in steps] == [1, 2]

    finished = events[-1]["event"]
    assert (finished["status"], finished["end_reason"], finished["steps"]) == ("finished", "final answer", 2)
    assert finished["final_score"] == trace["final_score"] and finished["final_score"] > 0
    assert events[-1]["trace"]["status"] == "finished"


@pytest.mark.slow
def test_plugin_agent_llm_and_sandbox_are_used_and_llm_calls_are_observed(venv, tmp_path):
    # register_agents, register_llms and register_sandboxes from one fixture, all used in one run.
    run_dir, trace, events = run_observed(venv, tmp_path, "--agent", "fixture-asker", "--llm", "fixture-echo:train.py",
                                          "--sandbox", "fixture-plain")
    assert [e["hook"] for e in events] == ["run_started", "llm_call_finished", "sandbox_popen", "step_finished",
                                           "step_finished", "run_finished"]
    call = events[1]["event"]
    assert call["run_dir"] == str(run_dir) and call["role"] == "main" and call["model"] == "fixture-echo:train.py"
    assert (call["prompt_tokens"], call["completion_tokens"], call["cost_usd"]) == (7, 3, 0.5)
    assert call["latency_s"] >= 0
    assert (call["step"], call["error"], call["cached"], call["retries"]) == (1, None, False, 0)
    assert events[2]["event"]["argv"][-1] == "train.py"
    assert trace["steps"][0]["action"]["entries"] == {"asked": "train.py"}
    assert trace["config"]["sandbox"] == "fixture-plain"
    usage = events[-1]["event"]["usage"]
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (1, 7, 3)
    assert trace["usage"]["calls"] == 1 and trace["final_score"] == events[-1]["event"]["final_score"]


@pytest.mark.slow
def test_failing_observer_cannot_break_a_run(venv, tmp_path):
    run_dir, trace, events = run_observed(venv, tmp_path, "--agent", "baseline",
                                          MLAB_FIXTURE_OBSERVER_FAIL="step_finished")
    assert trace["status"] == "finished" and trace["final_score"] > 0
    assert [e["hook"] for e in events] == ["run_started", "step_finished", "step_finished", "run_finished"]
    errors = (run_dir / "errors.log").read_text()
    assert "observer hook step_finished failed" in errors
    assert "fixture observer fails in step_finished" in errors


@pytest.mark.slow
def test_task_hooks_fire_for_prepare_baseline_run_and_eval(venv, tmp_path):
    """task_prepared once per home, baseline_measured after the starter ran, submission_scored for the starter's
    workspace, a run's final snapshot and every snapshot `mlab eval` scores."""
    task_events = tmp_path / "task-events.jsonl"
    env = {"MLAB_FIXTURE_TASK_EVENTS": str(task_events), "MLAB_HOME": str(tmp_path / "home")}

    def events():
        return [json.loads(line) for line in task_events.read_text().splitlines()]

    assert venv.mlab("prepare", "example/line-fit", env=env).returncode == 0
    assert venv.mlab("prepare", "example/line-fit", env=env).returncode == 0  # already there: no event
    (prepared,) = events()
    assert prepared["hook"] == "task_prepared" and prepared["event"]["task"] == "example/line-fit"
    assert prepared["event"]["home"] == str((tmp_path / "home").resolve())

    result = venv.mlab("baseline", "example/line-fit", env=env)
    assert result.returncode == 0, result.stderr
    scored, measured = events()[1:]
    assert scored["hook"] == "submission_scored" and scored["event"]["run_dir"] is None
    assert measured["hook"] == "baseline_measured"
    # the default, auto: which sandbox it picks is the harness's call; the event names one that takes part in auto
    assert load_registry().items["sandboxes"][measured["event"]["sandbox"]].auto_rank is not None
    assert measured["event"]["scores"] == [scored["event"]["score"]] and measured["event"]["recorded"] is True

    run_dir = tmp_path / "run"
    result = venv.mlab("run", "--task", "example/line-fit", "--agent", "baseline", "--run-dir", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    final = events()[3]
    assert final["hook"] == "submission_scored" and final["event"]["snapshot"] == "final"
    assert final["event"]["run_dir"] == str(run_dir.resolve())
    result = venv.mlab("eval", "--json", str(run_dir), env=env)
    assert result.returncode == 0, result.stderr
    again = events()[4]
    assert again["hook"] == "submission_scored" and again["event"]["score"] == final["event"]["score"]
    assert json.loads(result.stdout)[0]["score"] == final["event"]["score"]
