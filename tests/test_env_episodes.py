"""mlab tasks as environments for training agents (issue 45): a trainer drives a run turn by turn, one tool call a
step, through the run's own environment and sandbox; the reward is the task's verdict, and each episode is a run
folder that `mlab eval` reads with the same score."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from mlab.core.actions import ACTION_SPECS
from mlab.core.agentkit.tools import action_tools
from mlab.core.env import Episode, EpisodeOver, TaskEnv, ToolAction, prepare_task
from tests.fixtures.cli import mlab
from tests.fixtures.sandboxes import CONFINING, make_sandbox

pytestmark = pytest.mark.timeout(600)

TASK = "lite/wine"


@pytest.fixture(scope="module")
def wine_home(tmp_path_factory):
    """One MLAB_HOME for the module: the task prepared and its baseline measured once (prepare_task)."""
    home = tmp_path_factory.mktemp("env-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLAB_HOME", str(home))
        prepare_task(TASK)
    return home


@pytest.fixture
def home(wine_home, monkeypatch):
    monkeypatch.setenv("MLAB_HOME", str(wine_home))
    return wine_home


@pytest.mark.slow  # over 2 s on two cores
def test_eight_environments_at_once_each_episode_reads_in_mlab_eval_with_the_same_score(home, tmp_path):
    runs = tmp_path / "runs"
    outcomes: dict[int, object] = {}
    failures: list[BaseException] = []

    def drive(i: int) -> None:
        try:
            with Episode(TASK, runs / f"ep{i}", seed=i) as episode:
                prompt = episode.start()
                assert "train.py" in prompt and "hidden" in prompt  # the task's own problem text
                assert "execute_script" in [t["function"]["name"] for t in episode.tools]
                listing = episode.call("list_files", dir_path=".")
                assert "train.py" in listing.observation and not listing.done
                if i % 2 == 0:  # half run the starter (a submission), half submit nothing
                    ran = episode.call("execute_script", script_name="train.py")
                    assert not ran.is_error, ran.observation
                outcomes[i] = episode.finish()
        except BaseException as exc:  # a thread's failure is the test's
            failures.append(exc)

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    done = mlab("eval", "--json", runs)
    assert done.returncode == 0, done.stderr
    rows = {Path(r["run_dir"]).name: r for r in json.loads(done.stdout)}
    assert sorted(rows) == [f"ep{i}" for i in range(8)]
    for i, outcome in outcomes.items():
        row = rows[f"ep{i}"]
        assert row["agent"] == "trainer" and row["status"] == "finished"
        assert row["score"] == outcome.score and row["improvement"] == outcome.improvement
        assert row["baseline"] == outcome.verdict["baseline"] is not None
        assert row["steps"] == (2 if i % 2 == 0 else 1)
        if i % 2 == 0:
            assert outcome.score is not None and outcome.reward == outcome.improvement
        else:  # nothing submitted: no score, the reward for an invalid submission
            assert outcome.score is None and outcome.reward == -1.0


@pytest.mark.slow  # over 2 s on two cores
def test_tools_are_the_seed_actions_that_need_no_model_as_function_tools(home, tmp_path):
    with Episode(TASK, tmp_path / "run") as episode:
        episode.start()
        offered = {n: s for n, s in ACTION_SPECS.items() if not s.uses_llm and not s.interactive_only}
        assert episode.tools == action_tools(offered)
        assert episode.finish().status == "finished"
    with Episode(TASK, tmp_path / "few", tools=["execute_script", "Final Answer"]) as episode:
        episode.start()
        assert [t["function"]["name"] for t in episode.tools] == ["execute_script", "final_answer"]
        refused = episode.call("list_files", dir_path=".")
        assert refused.is_error and "not offered" in refused.observation


@pytest.mark.slow  # over 2 s on two cores
def test_a_final_answer_ends_the_episode_and_later_calls_are_refused(home, tmp_path):
    with Episode(TASK, tmp_path / "run") as episode:
        episode.start()
        episode.call("execute_script", script_name="train.py")
        now = episode.score_now()  # an intermediate reward: the latest snapshot judged, the run going on
        assert now.score is not None and not episode.done
        answer = episode.call("final_answer", final_answer="ran the starter")
        assert answer.done and episode.done
        with pytest.raises(EpisodeOver):
            episode.call("list_files", dir_path=".")
        outcome = episode.finish()
    assert outcome.score == now.score and outcome.end_reason == "final answer"
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert [s["action"]["name"] for s in trace["steps"]] == ["Execute Script", "Final Answer"]


def test_the_step_limit_ends_an_episode(home, tmp_path):
    with Episode(TASK, tmp_path / "run", max_steps=1) as episode:
        episode.start()
        turn = episode.call("list_files", dir_path=".")
        assert turn.done and "max steps reached (1)" in turn.observation
        assert episode.finish().end_reason == "max steps reached (1)"


@pytest.mark.slow  # over 2 s on two cores
def test_openenv_shape_reset_step_state(home, tmp_path):
    env = TaskEnv(TASK, runs_dir=tmp_path / "runs")
    first = env.reset(seed=3)
    assert not first.done and first.reward is None and "train.py" in first.text
    assert first.tools == env.episode.tools and env.state.step_count == 0
    ran = env.step(ToolAction(tool="execute_script", arguments={"script_name": "train.py"}))
    assert not ran.done and ran.reward is None and env.state.step_count == 1
    last = env.step(ToolAction(tool="final_answer", arguments={"final_answer": "done"}))
    assert last.done and last.reward == env.episode.finish().reward
    assert env.state.run_dir == str(env.episode.run_dir) and env.state.episode_id == env.episode.run_dir.name
    second = env.reset()  # a new episode in a new run folder
    assert env.state.step_count == 0 and not second.done
    env.close()
    assert len(list((tmp_path / "runs").iterdir())) == 2


@pytest.mark.slow  # over 2 s on two cores
@pytest.mark.parametrize("sandbox", CONFINING)
def test_agent_code_run_through_the_tools_reaches_no_hidden_answer(home, tmp_path, sandbox, monkeypatch):
    make_sandbox(sandbox)  # skips where it cannot run here
    monkeypatch.setenv("OPENAI_API_KEY", "sk-user-secret")
    run_dir = tmp_path / "run"
    with Episode(TASK, run_dir, sandbox=sandbox) as episode:
        episode.start()
        episode.call("execute_script", script_name="train.py")
        # the probes of the program agents' tests (MLAB_HOME, the run's own records), from inside the workspace
        probes = [str(home), str(run_dir / "trace.json"), str(run_dir / "steps.jsonl"),
                  str(run_dir / "llm_calls.jsonl"), str(run_dir / "snapshots"), str(run_dir / "objects")]
        assert all(os.path.exists(p) for p in probes if not p.endswith("llm_calls.jsonl"))  # there to find
        episode.call("write_file", file_name="probe.py", content=PROBE.format(probes=probes))
        found = episode.call("execute_script", script_name="probe.py")
        assert "FOUND NOTHING" in found.observation, found.observation
        assert "sk-user-secret" not in found.observation
        outcome = episode.finish()
    assert outcome.score is not None  # the probe changed nothing the task scores


PROBE = '''import os
found = []
for root in {probes!r}:
    if os.path.isfile(root):
        found.append(root)
    for folder, _dirs, names in os.walk(root):
        found += [os.path.join(folder, name) for name in names]
found += [k for k in os.environ if "KEY" in k]
print("FOUND", " | ".join(found) or "NOTHING")
'''
