"""`mlab data`: tasks without files to fetch are one line, and URLs stay whole at 80 columns."""
from __future__ import annotations

import json

from tests.fixtures.cli import mlab_in_process


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
