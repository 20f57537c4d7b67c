"""Issue 44, item 12: what a terminal, a pipe or a browser window shows whole. The bench's live block keeps a
run's seed and the whole status line at 80 columns; `mlab runs` and the report's tables wrap between words, never
inside one; the viewer's run list keeps a row on one line and its success and cost in view at 1400 px."""
from __future__ import annotations

import io
import re
import time

import pytest
from rich.console import Console

from tests.fixtures.cli import mlab_in_process


def _bench_block(width: int) -> list[str]:
    from mlab.cli.view import BenchView
    from mlab.core.bench.driver import BenchStatus, RunProgress

    status = BenchStatus(total=504, done=120, failed=7, pending=370)
    status.tokens, status.unpriced_runs = 12_345_678, 3
    status.running = [RunProgress(key=f"mlagentbench/house-price|research|openai/gpt-4o-mini-2024-07-18|s{seed}",
                                  step=17, max_steps=50, tokens=345_678, calls=17, unpriced_calls=0, cost_usd=0.4321,
                                  action="Execute Script", started=time.time() - 99,
                                  step_started=time.time() - 9) for seed in (7, 112)]
    view = BenchView("bench benches/house-price-gpt4o-mini-full")
    # as make_console makes it for Live: soft wrap, so what does not fit is cut at the terminal's edge
    view.console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None, soft_wrap=True)
    view.status = status
    view.console.print(view._render())
    return view.console.file.getvalue().splitlines()


def test_the_bench_block_keeps_each_runs_seed_and_the_whole_status_line_at_80_columns():
    for width in (80, 120):
        lines = _bench_block(width)
        assert all(len(line.rstrip()) <= width for line in lines), (width, lines)
        text = "\n".join(lines)
        assert re.search(r"\|s7\b", text) and re.search(r"\|s112\b", text), (width, text)  # the seed, whole
        flat = " ".join(line.strip() for line in lines)
        assert "370 pending (of 504)" in flat and "13,037,034 tokens" in flat and "(3 unpriced runs)" in flat, \
            (width, text)


@pytest.mark.slow  # over 2 s on two cores
def test_runs_and_report_tables_never_break_a_word(tmp_path):
    from tests.fixtures.bench_cli import report_bench

    bench, home = report_bench(tmp_path)
    for width in ("80", "160"):
        shown = mlab_in_process("runs", bench, home=home["MLAB_HOME"], env={"COLUMNS": width})
        assert shown.returncode == 0, shown.stderr
        names = re.findall(r"^│ …?[\w/-]+--s\d ", shown.stdout, re.M)
        assert len(names) == 9, shown.stdout  # every run's folder name on one line, its seed with it
        # the first line names the folder, whose path is as long as it is (the tmp path grows under xdist)
        assert all(len(line) <= int(width) for line in shown.stdout.splitlines()[1:]), shown.stdout
        assert not re.search(r"improvem\s*┃|finishe\s*│", shown.stdout), shown.stdout
        report = mlab_in_process("report", bench, "--no-plots", "--no-html", "--out", tmp_path / "r",
                                 home=home["MLAB_HOME"], env={"COLUMNS": width})
        assert report.returncode == 0, report.stderr
        for word in ("improvement", "(original)", "reference"):
            assert word in report.stdout, (width, word, report.stdout)
        assert not re.search(r"improvem\s*┃|\(origin\s*┃", report.stdout), report.stdout
