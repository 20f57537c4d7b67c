"""Issue 44, item 14: `mlab export` of a killed run says it was interrupted (Inspect status `cancelled`, the
sample's error saying so), its file name carries the model's name, not its path; the run's own tags are the
log's tags (not the agent); and export without --format is one line."""
from __future__ import annotations

import json

import pytest

from tests.fixtures.cli import entry, mlab, mlab_in_process


@pytest.mark.slow  # over 2 s on two cores
def test_a_killed_run_exports_as_cancelled_named_by_its_models_name_tagged_by_its_tags(tmp_path):
    read_eval_log = pytest.importorskip("inspect_ai.log").read_eval_log
    home = tmp_path / "home"
    run_dir = tmp_path / "killed"
    made = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", run_dir,
                "--sandbox", "local", "--tag", "ablation", entry=entry("tests.fixtures.gated_run", "mlab"), home=home)
    assert made.returncode == 0, made.stderr
    trace = json.loads((run_dir / "trace.json").read_text())
    trace["status"], trace["end_reason"] = "running", None  # what `kill -9` of `mlab run` leaves
    trace["config"]["llm"] = "hosted_vllm//data/models/Qwen2.5-7B-Instruct"  # a model served from a path
    (run_dir / "trace.json").write_text(json.dumps(trace))
    shown = mlab("export", "--format", "inspect", run_dir, "--out", tmp_path / "logs", "--json",
                 entry=entry("tests.fixtures.gated_run", "mlab"), home=home)
    assert shown.returncode == 0, shown.stderr
    [path] = json.loads(shown.stdout)["logs"]
    assert "data-models" not in path and "Qwen2.5-7B-Instruct" in path, path
    log = read_eval_log(path)
    assert log.status == "cancelled", log.status
    [sample] = log.samples
    assert sample.error is not None and sample.error.message.startswith("interrupted"), sample.error
    assert log.eval.tags == ["ablation"], log.eval.tags


def test_export_without_a_format_is_one_line_without_tabs(tmp_path):
    shown = mlab_in_process("export", tmp_path)
    assert shown.returncode == 2
    assert len(shown.stderr.strip().splitlines()) == 1 and "\t" not in shown.stderr, shown.stderr
    assert "--format" in shown.stderr and "inspect" in shown.stderr and "chat-jsonl" in shown.stderr
