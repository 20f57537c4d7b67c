"""Issue 34, item 7's leftovers: the smaller defects a researcher met that the first round left open, one test each."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.bench_cli import REGISTRY
from tests.fixtures.bench_plugins import bench_registry
from tests.fixtures.cli import REPO, cli_env, entry, mlab, mlab_in_process
from tests.fixtures.gated_run import GATES_VARIABLE
from tests.test_researcher_round2_terminal import Tmux

GATED = entry("tests.fixtures.gated_run", "mlab")  # the CLI with the bench fixtures and fixture-gated registered


@pytest.fixture(scope="module")
def two_seed_bench(tmp_path_factory):
    """A finished bench of two runs that differ only in their seed."""
    out = tmp_path_factory.mktemp("bench") / "bench"
    made = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--runs", "2",
                "--agent-option", "steps=2", "--bench-dir", out, "--registry", REGISTRY)
    assert made.returncode == 0, made.stderr
    return out


def test_eval_of_a_bench_at_80_columns_keeps_runs_apart_by_their_seed(two_seed_bench):
    shown = mlab_in_process("eval", two_seed_bench, registry=bench_registry, env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), shown.stdout
    rows = [line for line in lines if line.startswith("│")]
    names = [row.split("│")[1].strip() for row in rows if row.split("│")[1].strip()]
    assert len(names) == 2 and names[0] != names[1], shown.stdout
    assert [re.search(r"s\d+$", name).group() for name in names] == ["s0", "s1"], shown.stdout
    for column in ("status", "steps", "score"):  # what a run did stays readable, not cut to letters
        assert column in shown.stdout, shown.stdout


def _killed_after_two_steps(tmp_path) -> tuple[Path, Path]:
    """A gated run killed while its agent waits to choose step 3: a run to resume, with steps 1 and 2 done."""
    from mlab.core.run.trace import read_trace

    gates, run_dir = tmp_path / "gates", tmp_path / "run"
    gates.mkdir()
    for n in (1, 2):
        (gates / f"step{n}").write_text("")
    proc = subprocess.Popen([*GATED, "run", "--task", "fixture/counter", "--agent", "fixture-gated", "--run-dir",
                             str(run_dir), "--max-steps", "10", "--sandbox", "local"], cwd=REPO,
                            env=cli_env({GATES_VARIABLE: str(gates)}), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not ((run_dir / "trace.json").is_file() and len(read_trace(run_dir).steps) == 2):
            assert time.monotonic() < deadline and proc.poll() is None, "the run never finished its step 2"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    for n in (3, 4):
        (gates / f"step{n}").write_text("")
    return gates, run_dir


@pytest.mark.slow
def test_resume_continues_the_step_count_and_table_from_the_steps_already_done(tmp_path):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    gates, run_dir = _killed_after_two_steps(tmp_path)
    argv = [*GATED, "run", "--resume", str(run_dir)]
    env = cli_env({"TERM": "xterm-256color", "COLUMNS": None, "LINES": None, GATES_VARIABLE: str(gates)})
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k))
    command = f"cd {shlex.quote(str(REPO))} && env -i {exports} {shlex.join(argv)}; echo EXIT=$?; sleep 600"
    tmux = Tmux(tmp_path / "tmux.sock", command, cols=80, rows=40)
    try:
        final = tmux.wait_for(r"EXIT=\d+")
    finally:
        tmux.close()
    assert "EXIT=0" in final, final
    left = final[final.rindex("fixture-gated on"):]  # the table left in the scrollback
    assert "4/10 steps" in left and "0/10" not in final and "1/10" not in final, final
    assert "resumed after step 2" in left, final
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^│ *(\d+) *│ ([^│]+)│", left, re.M)}
    assert rows == {"1": "Write File", "2": "Execute Script", "3": "Append File", "4": "Final Answer"}, final


def test_resume_without_a_terminal_says_where_it_resumed(tmp_path):
    gates, run_dir = _killed_after_two_steps(tmp_path)
    resumed = mlab("run", "--resume", run_dir, entry=GATED, env={GATES_VARIABLE: str(gates)})
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stdout.splitlines()
    assert lines[0].startswith("resumed after step 2"), resumed.stdout
    assert [line.split(":")[0] for line in lines if line.startswith("step ")] == ["step 3", "step 4"], resumed.stdout


def test_baseline_with_several_runs_says_each_run_as_it_starts_and_ends(tmp_path):
    measured = mlab("baseline", "fixture/counter", "--runs", "2", "--sandbox", "local", entry=GATED,
                    home=tmp_path / "home")
    assert measured.returncode == 0, measured.stderr
    said = [line for line in measured.stderr.splitlines() if line.startswith("fixture/counter: run ")]
    assert said[0] == "fixture/counter: run 1/2 started" and said[2] == "fixture/counter: run 2/2 started", said
    for line in (said[1], said[3]):
        assert re.fullmatch(r"fixture/counter: run [12]/2 ended: lines 1 in \d+\.\d s", line), said
    assert len(said) == 4 and "baseline lines = 1" in measured.stdout, measured.stdout


def test_make_run_says_each_setup_stage_while_it_works(tmp_path):
    """`make run` on a fresh machine spends minutes in its set-up: each install stage is a line as it starts. The
    venv's python here is a stand-in that holds the torch install until the test has read its line."""
    venv, release = tmp_path / "venv", tmp_path / "release"
    (venv / "bin").mkdir(parents=True)
    stand_in = (f"#!/bin/bash\ncase \"$*\" in *torch*) for _ in $(seq 1200); do [ -e {shlex.quote(str(release))} ] "
                "&& exit 0; sleep 0.05; done; exit 1;; esac\nexit 0\n")  # 60 s at most
    for name in ("python", "mlab"):
        (venv / "bin" / name).write_text(stand_in)
        (venv / "bin" / name).chmod(0o755)
    make = subprocess.Popen(["make", "--no-print-directory", "run", f"VENV={venv}", "LITE_TASKS=",
                             f"SETUP_LOG={tmp_path / 'setup.log'}", f"DEMO_DIR={tmp_path / 'demo'}"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        while not any("torch" in line for line in seen):
            line = make.stdout.readline()
            assert line, f"make ended before saying the torch stage: {seen}"
            seen.append(line)
        assert make.poll() is None  # said while the stage is still going
        release.write_text("")
        seen += make.stdout.readlines()
        assert make.wait(timeout=60) == 0, seen
    finally:
        make.kill()
        make.wait()
    stages = [line for line in seen if "pip install" in line]
    assert len(stages) >= 5 and all(len(line) <= 101 for line in stages), seen
    assert (venv / ".installed").exists() and (tmp_path / "setup.log").is_file()


def test_data_of_tasks_without_files_is_one_line_not_an_empty_table():
    shown = mlab_in_process("data", "lite/digits", "lite/wine", env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["no files to fetch: lite/digits, lite/wine generate their data at prepare"]


def test_data_never_breaks_a_url_across_lines_at_80_columns():
    tasks = ("mlagentbench/babylm", "mlagentbench/fathomnet", "lite/digits")
    listed = mlab_in_process("data", *tasks, "--json")
    urls = {row[key] for row in json.loads(listed.stdout) for key in ("url", "terms") if row[key].startswith("http")}
    assert any(len(url) > 70 for url in urls), urls
    shown = mlab_in_process("data", *tasks, env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    for url in urls:
        assert any(url in line for line in lines), f"{url} is not whole on a line:\n{shown.stdout}"
    assert all(len(line) <= 80 for line in lines if line[:1] in "┏┃┡│└"), shown.stdout
    assert lines[-1] == "no files to fetch: lite/digits generates its data at prepare", shown.stdout


def test_new_task_metric_text_follows_the_metric_in_task_yaml(tmp_path):
    """The scaffold names its metric once (metric:); what the agent is told follows that field when it changes."""
    from mlab.core.declarative.task import DeclarativeTask

    made = mlab_in_process("new-task", tmp_path / "my-task", "--metric", "mse")
    assert made.returncode == 0, made.stderr
    task_yaml = tmp_path / "my-task" / "task.yaml"
    assert re.findall(r"\bmse\b", task_yaml.read_text()) == ["mse"], task_yaml.read_text()
    task_yaml.write_text(task_yaml.read_text().replace("metric: mse", "metric: accuracy"))
    task = DeclarativeTask.from_folder(tmp_path / "my-task", "local")
    for told in (task.description, task.research_problem):
        assert "accuracy" in told and "higher is better" in told and "mse" not in told and "{" not in told, told


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """A finished run of fixture/counter and the MLAB_HOME it ran with."""
    where = tmp_path_factory.mktemp("one")
    home, run_dir = where / "home", where / "my-run"
    done = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", run_dir,
                "--sandbox", "local", entry=GATED, home=home)
    assert done.returncode == 0, done.stderr
    return run_dir, home


@pytest.mark.slow
def test_report_of_one_run_writes_outside_it_and_shows_no_intervals_or_aup(one_run, tmp_path):
    run_dir, home = one_run
    before = sorted(p.name for p in run_dir.iterdir())
    elsewhere = {"PYTHONPATH": str(REPO)}  # the fixture CLI, run from another folder
    shown = mlab("report", run_dir, "--no-plots", entry=GATED, home=home, cwd=tmp_path, env=elsewhere)
    assert shown.returncode == 0, shown.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing written into the run
    assert (tmp_path / "report-my-run" / "index.html").is_file(), shown.stdout
    headers = [line for line in shown.stdout.splitlines() if line.startswith("┃")]
    assert headers and not any("AUP" in line or "SEM" in line for line in headers), shown.stdout
    assert "Overall" not in shown.stdout and "Performance ratios" not in shown.stdout, shown.stdout
    assert not re.search(r"\(\d+-\d+\)", shown.stdout), shown.stdout  # no interval such as 100% (21-100)
    assert "one run: no intervals or AUP" in shown.stdout, shown.stdout
    assert re.search(r"│ fixture/counter │ fixture-appender │.*│ 5 ", shown.stdout), shown.stdout  # its score
    tables = mlab("report", run_dir, "--no-plots", "--no-html", "--format", "csv", "--out", tmp_path / "csv",
                  entry=GATED, home=home, cwd=tmp_path, env=elsewhere)
    assert tables.returncode == 0, tables.stderr
    written = {p.name for p in (tmp_path / "csv" / "tables").iterdir()}
    assert "overall.csv" not in written and "profiles.csv" not in written, written
    assert not any("_lo" in p.read_text().splitlines()[0] for p in (tmp_path / "csv" / "tables").glob("*.csv"))


@pytest.mark.slow
def test_report_never_writes_into_a_run_folder(one_run, tmp_path):
    run_dir, home = one_run
    refused = mlab("report", run_dir, "--no-plots", "--out", run_dir / "report", entry=GATED, home=home)
    assert refused.returncode == 2 and "run folder" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (run_dir / "report").exists()


def _bench_sandboxes(bench: Path) -> dict[str, str]:
    """run folder -> the sandbox its config.json records."""
    return {run.name[-2:]: json.loads((run / "config.json").read_text())["sandbox"]
            for run in sorted((bench / "runs").iterdir())}


@pytest.mark.slow
def test_sandbox_auto_is_the_same_for_every_run_of_a_bench(tmp_path):
    """bubblewrap installed midway (its plugin loaded for the second half): the bench keeps what its runs used."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    bench = tmp_path / "bench"
    args = ("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--agent-option", "steps=2",
            "--bench-dir", bench, "--registry", REGISTRY)
    first = mlab(*args, "--runs", "1", env={"MLAB_LOAD_PLUGINS": "local"})
    assert first.returncode == 0, first.stderr
    second = mlab(*args, "--runs", "2")
    assert second.returncode == 0, second.stderr
    assert _bench_sandboxes(bench) == {"s0": "local", "s1": "local"}, second.stderr
    assert "sandbox" not in second.stderr, second.stderr


@pytest.mark.slow
def test_a_bench_whose_sandbox_is_gone_says_so_in_one_line(tmp_path):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    bench = tmp_path / "bench"
    args = ("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender", "--agent-option", "steps=2",
            "--bench-dir", bench, "--registry", REGISTRY)
    first = mlab(*args, "--runs", "1")
    assert first.returncode == 0, first.stderr
    second = mlab(*args, "--runs", "2", env={"MLAB_LOAD_PLUGINS": "local"})
    assert second.returncode == 0, second.stderr
    assert _bench_sandboxes(bench) == {"s0": "bwrap", "s1": "local"}
    said = [line for line in second.stderr.splitlines() if "sandbox" in line]
    assert len(said) == 1 and "bwrap" in said[0] and "local" in said[0], second.stderr


@pytest.mark.slow
def test_the_viewer_shows_a_runs_method_label_in_its_header_and_the_overview(tmp_path):
    """A run started with --label names its method in `mlab view` (run header, overview) and in the report's page."""
    from mlab.core.view.server import Viewer
    from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(MISSING)
    runs, home = tmp_path / "runs", tmp_path / "home"
    for name, label in (("labelled", ["--label", "My method"]), ("plain", [])):
        done = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", runs / name,
                    "--sandbox", "local", *label, entry=GATED, home=home)
        assert done.returncode == 0, done.stderr
    with Viewer(runs) as viewer, Browser(tmp_path / "profile") as browser:
        browser.open(viewer.url)
        browser.wait_for("return document.querySelectorAll('#groups tbody tr').length === 2;", timeout_s=60)
        methods = browser.run("return Array.prototype.map.call(document.querySelectorAll('#groups tbody tr'),"
                              " function (tr) { return tr.querySelector('td.method').textContent; });")
        assert sorted(methods) == ["My method", "fixture-appender"], methods
        browser.open(viewer.url + "#run=labelled")
        shown = browser.wait_for("var e = document.getElementById('run-method'); return e && e.textContent;")
        assert shown == "method My method", shown
    report = mlab("report", runs, "--no-plots", entry=GATED, home=home)
    assert report.returncode == 0, report.stderr
    with Browser(tmp_path / "profile2") as browser:
        browser.open((runs / "report" / "index.html").as_uri() + "#run=labelled")
        shown = browser.wait_for("var e = document.getElementById('run-method'); return e && e.textContent;")
        assert shown == "method My method", shown
