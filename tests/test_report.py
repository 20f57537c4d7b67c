"""`mlab report`: tables in the terminal, report.json, PNG plots and the static HTML report."""
from __future__ import annotations

import json
import re

import pytest

from tests.fixtures.bench_cli import report_bench
from tests.fixtures.cli import mlab


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return report_bench(tmp_path_factory.mktemp("report"))


@pytest.mark.slow
def test_tables_metrics_and_files(bench):
    out, home = bench
    result = mlab("report", out, "--compare", "fixture-appender", "baseline", env=home)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for title in ("Runs per task and agent", "Success rate by improvement threshold", "Overall",
                  "Performance ratios", "Why runs have no valid final submission", "Paired comparison"):
        assert title in text
    assert re.search(r"fixture-appender\s.*\b100% \(44-100\)", text)  # 3/3 with its Wilson interval
    # both denominators, labelled and explained; fixture-scenario's out-of-memory run leaves the original's count
    assert text.count("(all runs)") >= 2 and text.count("(original)") >= 2 and "comparable to the paper" in text
    assert re.search(r"fixture-scenario\s.*0% \(0-56\)\s.*0% \(0-66\)", text)
    assert re.search(r"AUP .*\n(.*\n)*.*fixture-appender .*│ 1 +│", text) and "± SEM" in text
    assert re.search(r"fixture/counter: .*baseline agent, 3 of 3 runs", text)
    data = json.loads((out / "report" / "report.json").read_text())
    groups = {g["label"]: g for g in data["groups"]}
    assert data["baselines"] == {"fixture/counter": 1.0}
    appender, scenario = groups["fixture-appender"], groups["fixture-scenario"]
    assert appender["success"]["10"]["mean"] == 1.0 and appender["improvement"]["mean"] == pytest.approx(2.0)
    assert appender["success_any"]["mean"] == 1.0 and groups["baseline"]["success"]["10"]["mean"] == 0.0
    assert scenario["failures"] == {"invalid_format": 1, "out_of_memory": 1, "no_submission": 1}
    assert scenario["valid_final"] == 0 and scenario["improvement"]["mean"] is None
    assert appender["success_original"] == appender["success_rate"] and appender["success_rate"]["n"] == 3
    assert (scenario["success_rate"]["n"], scenario["success_original"]["n"]) == (3, 2)
    overall = data["overall"]
    assert overall["fixture-appender"]["success_original"]["mean"] == 1.0
    assert overall["fixture-appender"]["aup"] == 1.0 and overall["fixture-scenario"]["aup"] == 0.0
    profiles = data["profiles"]
    assert profiles["ratios"]["fixture-appender"] == {"fixture/counter": 1.0} and profiles["tau_max"] == 1.0
    assert profiles["ratios"]["baseline"]["fixture/counter"] == pytest.approx(3.0)  # score 3 against 1
    assert {"success (all runs)", "success (original)", "aup"} <= set(data["legend"])
    (cmp,) = data["comparisons"]
    assert (cmp["a"], cmp["b"], cmp["wins"], cmp["losses"]) == ("fixture-appender", "baseline", 1, 0)
    assert cmp["success_diff"]["mean"] == 1.0 and 0 < cmp["success_diff"]["lo"] < 1 == cmp["success_diff"]["hi"]
    # 3 of 3 against 0 of 3: 1 of the C(6, 3) = 20 ways to deal the successes, doubled; one task: no overall test
    assert cmp["tasks"][0]["p_success"] == pytest.approx(0.1) and cmp["p_success"] is None


@pytest.mark.slow
def test_png_plots(bench):
    pytest.importorskip("matplotlib", reason="plots need the report extra: pip install 'mlab[report]'")
    out, home = bench
    result = mlab("report", out, "--out", out / "r2", env=home)
    assert result.returncode == 0, result.stderr
    for name in ("success_rate", "improvement", "score_over_steps", "success_vs_cost", "performance_profiles"):
        data = (out / "r2" / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
        assert f"{name}.png" in (out / "r2" / "index.html").read_text()


@pytest.mark.slow
def test_html_report_has_every_run_and_its_trace(bench):
    out, home = bench
    result = mlab("report", out, "--no-plots", "--out", out / "r3", env=home)
    assert result.returncode == 0, result.stderr
    page = (out / "r3" / "index.html").read_text()
    assert "file://" in result.stdout and "<img" not in page
    for heading in ("success (all runs)", "success (original)", "AUP (of 1)", "Performance ratios",
                    "comparable to the paper"):
        assert heading in page
    data_js = (out / "r3" / "data.js").read_text()
    index = json.loads(re.fullmatch(r"window\.MLAB_DATA = (\{.*\});\n", data_js, re.S).group(1))
    assert len(index["runs"]) == 9
    appender = next(r for r in index["runs"] if r["agent"] == "fixture-appender")
    script = (out / "r3" / "runs" / f"{appender['id']}.js").read_text()
    payload = json.loads(script[script.index(", ") + 2: script.rindex(");")])
    step2 = payload["steps"][1]
    assert step2["action"] == "Append File" and step2["score"] == 2.0
    assert step2["changes"][0]["file"] == "log.txt" and "+line 2" in step2["changes"][0]["diff"]
    assert step2["entries"] == {"thought": "adding line 2"}


@pytest.mark.slow
def test_json_output_and_bad_input(bench, tmp_path):
    out, home = bench
    result = mlab("report", out, "--json", "--no-plots", "--no-html", "--out", out / "r4", env=home)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {g["label"] for g in data["groups"]} == {"baseline", "fixture-appender", "fixture-scenario"}
    # the keys of earlier reports are all there, with the new ones beside them
    assert {"bench_dir", "baselines", "baseline_sources", "groups", "overall", "comparisons", "runs"} < set(data)
    assert {"success", "success_original", "aup"} <= set(data["overall"]["baseline"])
    for args, fragment in (((out, "--compare", "fixture-appender", "nobody"), "no runs of 'nobody'"),
                           ((tmp_path,), "holds no runs; give a run folder (with trace.json), a bench folder")):
        bad = mlab("report", *args, env=home)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and fragment in bad.stderr


def test_estimates_as_short_strings():
    from mlab.core.bench.formatting import num, pct, sem_pct, signed_pct
    from mlab.core.bench.metrics import Estimate

    assert pct(Estimate(n=8, mean=0.625, lo=0.31, hi=0.86)) == "62% (31-86)"
    # intervals by their ends: a bootstrap interval is seldom symmetric
    assert signed_pct(Estimate(n=8, mean=0.123, lo=-0.02, hi=0.168)) == "+12.3% (-2.0 to +16.8)"
    assert num(Estimate(n=8, mean=1234.0, lo=1000.0, hi=1900.0)) == "1,234 (1,000-1,900)"
    assert num(Estimate(n=3, mean=0.0, lo=0.0, hi=0.0)) == "0"
    assert num(Estimate(n=1, mean=0.5), ".2f", "$") == "$0.50"
    assert sem_pct(Estimate(n=8, mean=0.5, lo=0.2, hi=0.8, sem=0.0945)) == "±9.4" and sem_pct(Estimate(1, 0.5)) == "-"
    assert pct(Estimate(n=0, mean=None)) == signed_pct(Estimate(n=0, mean=None)) == "-"


def test_viewer_page_is_filled_from_its_package_files_in_one_pass():
    from mlab.core.bench.report_html import fill_page

    page = fill_page({"TITLE": "task %SUMMARY%", "SUMMARY": "<table></table>", "FIGURES": "", "CSP": "MLAB_CSP"})
    assert page.startswith("<!DOCTYPE html>") and page.count("task %SUMMARY%") == 2  # inserted text stays as is
    assert 'content="MLAB_CSP"' in page and '<script src="viewer.js"></script>' in page
    assert re.findall(r"%[A-Z]+%", page) == ["%SUMMARY%", "%SUMMARY%"]  # every placeholder filled
