"""`mlab report` of a single run: written outside the run folder, without intervals or AUP; a report
never goes into a run folder."""
from __future__ import annotations

import re

import pytest

from tests.fixtures.cli import REPO, entry, mlab

GATED = entry("tests.fixtures.gated_run", "mlab")  # the CLI with the bench fixtures and fixture-gated registered


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
