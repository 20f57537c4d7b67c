"""Method labels (issue 34, item 6): --label names a method; a model string's paths never reach a table, a CSV,
a plot or LaTeX; the CSVs carry the model; runs.csv has one row per run; the LaTeX tables fit a paper column."""
from __future__ import annotations

import csv
import functools
import json
import re
from pathlib import Path

import pytest

from mlab.core.bench.metrics import short_models
from tests.fixtures.agents_fixtures import fixture_registry
from tests.fixtures.bench_cli import REGISTRY, db_rows
from tests.fixtures.cli import mlab, mlab_in_process

TASK = "fixture/counter"


def test_paths_in_model_strings_become_file_names_told_apart_where_they_clash():
    shown = short_models(["scripted:/a/x/replies.jsonl", "scripted:/a/y/replies.jsonl", "scripted:/b/other.jsonl",
                          "openai/gpt-4o", "replay:/runs/r1/", None])
    assert shown == {"scripted:/a/x/replies.jsonl": "scripted:x/replies.jsonl",
                     "scripted:/a/y/replies.jsonl": "scripted:y/replies.jsonl",
                     "scripted:/b/other.jsonl": "scripted:other.jsonl", "openai/gpt-4o": "openai/gpt-4o",
                     "replay:/runs/r1/": "replay:r1", None: None}


def _files(folder: Path) -> dict[Path, str]:
    return {p: p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and p.suffix in (
        ".csv", ".tex", ".json", ".svg", ".html", ".js")}


@pytest.mark.slow
def test_a_bench_labels_its_methods_without_paths_everywhere(tmp_path):
    scripts = []
    for folder in ("one", "two"):  # two scripts with the same file name in different folders
        (tmp_path / folder).mkdir()
        script = tmp_path / folder / "replies.jsonl"
        script.write_text('"a"\n"b"\n"c"\n')
        scripts.append(script)
    out = tmp_path / "bench"
    result = mlab("bench", "--tasks", TASK, "--agents", "fixture-llm-stepper,fixture-appender", "--bench-dir", out,
                  "--registry", REGISTRY, "--llm", f"scripted:{scripts[0]}", "--llm", f"scripted:{scripts[1]}",
                  "--runs", "2", "--workers", "2", "--agent-option", "steps=2",
                  "--label", "fixture-appender=Appender", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = db_rows(out)
    assert {r["label"] for r in rows if r["agent"] == "fixture-appender"} == {"Appender"}
    assert all(json.loads(r["config"])["label"] == "Appender" for r in rows if r["agent"] == "fixture-appender")

    report = mlab("report", str(out), "--format", "csv", timeout=300)
    assert report.returncode == 0, report.stderr
    latex = mlab("report", str(out), "--format", "latex", "--no-plots", "--no-html", timeout=300)
    assert latex.returncode == 0, latex.stderr
    files = _files(out / "report")
    assert any(p.suffix == ".svg" for p in files) and any(p.suffix == ".tex" for p in files)
    for path, text in files.items():  # report.json and the page keep each run's model string as data
        if path.suffix not in (".json", ".html", ".js"):
            assert str(tmp_path) not in text, f"{path} holds an absolute path"
    data = json.loads((out / "report" / "report.json").read_text())
    labels = [*data["overall"], *(g["label"] for g in data["groups"]), *data["profiles"]["methods"]]
    assert labels and not any(str(tmp_path) in label for label in labels)
    page = (out / "report" / "data.js").read_text()  # the viewer gets each run's method label
    assert re.search(r'"method": ?"Appender"', page)
    assert re.search(r'"method": ?"fixture-llm-stepper \(scripted:one/replies.jsonl\)"', page)
    for name in (p.name for p in (out / "report").rglob("*")):
        assert str(tmp_path.name) not in name

    tables = out / "report" / "tables"
    per_task = list(csv.DictReader((tables / "per_task.csv").open()))
    methods = {(r["agent"], r["model"]) for r in per_task}
    assert methods == {("Appender", ""),
                       ("fixture-llm-stepper (scripted:one/replies.jsonl)", "scripted:one/replies.jsonl"),
                       ("fixture-llm-stepper (scripted:two/replies.jsonl)", "scripted:two/replies.jsonl")}
    overall = list(csv.DictReader((tables / "overall.csv").open()))
    assert {r["agent"] for r in overall} == {m for m, _ in methods} and "model" in overall[0]
    svg = "".join(t for p, t in files.items() if p.suffix == ".svg")
    assert "Appender" in svg and "scripted:one/replies.jsonl" in svg

    runs = list(csv.DictReader((tables / "runs.csv").open()))
    assert len(runs) == 6
    assert set(runs[0]) >= {"task", "method", "agent", "model", "seed", "score", "baseline", "improvement",
                            "success", "steps", "llm_calls", "tokens", "cost_usd", "time_s"}
    appender = [r for r in runs if r["method"] == "Appender"]
    assert [(r["agent"], r["seed"], r["model"]) for r in appender] == [("fixture-appender", "0", ""),
                                                                      ("fixture-appender", "1", "")]
    assert all(r["score"] and r["success"] in ("True", "False") and int(r["steps"]) >= 1 for r in appender)


@pytest.mark.slow
def test_latex_tables_fit_a_paper_column(tmp_path):
    from tests.fixtures.bench_cli import report_bench

    out, home = report_bench(tmp_path)
    result = mlab("report", str(out), "--format", "latex", "--no-plots", "--no-html", env=home, timeout=300)
    assert result.returncode == 0, result.stderr
    specs = re.findall(r"\\begin\{tabular\}\{([lr]+)\}", result.stdout)
    assert specs and max(len(s) for s in specs) <= 6, specs
    assert "success (all runs)" in result.stdout and "cost" in result.stdout  # nothing dropped by the split


run_fixture = functools.partial(mlab_in_process, registry=fixture_registry)


def test_run_label_is_recorded_and_names_the_method(tmp_path):
    run_dir = tmp_path / "runs" / "r"
    result = run_fixture("run", "--task", "fixture/tiny-clf", "--llm", "fixture-policy", "--max-steps", "5",
                         "--run-dir", str(run_dir), "--agent", "react", "--label", "ReAct (ours)")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((run_dir / "trace.json").read_text())["config"]["label"] == "ReAct (ours)"
    bad = run_fixture("run", "--task", "fixture/tiny-clf", "--llm", "fixture-policy", "--label", " ")
    assert bad.returncode == 2 and "--label" in bad.stderr


def test_bench_label_of_an_agent_not_in_the_bench_is_one_line_exit_2(tmp_path):
    result = mlab_in_process("bench", "--tasks", TASK, "--agents", "baseline", "--label", "react=R",
                             "--bench-dir", tmp_path / "b", "--registry", REGISTRY)
    assert result.returncode == 2 and "--label takes AGENT=NAME" in result.stderr
