"""`mlab baseline --runs N` says each run as it starts and ends."""
from __future__ import annotations

import re

from tests.fixtures.cli import entry, mlab

GATED = entry("tests.fixtures.gated_run", "mlab")  # the CLI with the bench fixtures and fixture-gated registered


def test_baseline_with_several_runs_says_each_run_as_it_starts_and_ends(tmp_path):
    measured = mlab("baseline", "fixture/counter", "--runs", "2", "--sandbox", "local", entry=GATED,
                    home=tmp_path / "home")
    assert measured.returncode == 0, measured.stderr
    said = [line for line in measured.stderr.splitlines() if line.startswith("fixture/counter: run ")]
    assert said[0] == "fixture/counter: run 1/2 started" and said[2] == "fixture/counter: run 2/2 started", said
    for line in (said[1], said[3]):
        assert re.fullmatch(r"fixture/counter: run [12]/2 ended: lines 1 in \d+\.\d s", line), said
    assert len(said) == 4 and "baseline lines = 1" in measured.stdout, measured.stdout
