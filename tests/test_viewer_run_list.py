"""Issue 44, items 12 and 13, in `mlab view`'s run list (a real headless Chromium): at 1400 px each run is a row of
its name and one line under it, with success and cost in view; a group of unpriced runs costs "unknown", as each
of its runs does, not $0.0000; a run still going has no success yet (it was "no")."""
from __future__ import annotations

import fcntl
import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None, reason=MISSING)]

MODEL = "openrouter/meta-llama/llama-3.1-405b-instruct-2024-07-18"
UNPRICED = json.dumps({"completion": "ok", "prompt_tokens": 100, "completion_tokens": 20, "cost_usd": None})


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    """A folder of lite/wine runs with long names and a long model: two finished whose model calls had no price,
    one still going (its lock held here)."""
    from mlab.core.models import RunConfig
    from mlab.core.plugins.registry import load_registry
    from mlab.core.run.runner import Runner

    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    template = tmp_path / "template"
    Runner(template, RunConfig(task="lite/wine", agent="baseline", sandbox="local"), load_registry(),
           warn=lambda _t: None).start()
    folder = tmp_path / "runs"
    for seed, status in ((11, "finished"), (12, "finished"), (13, "running")):
        name = f"mlagentbench__house-price--research-with-long-agent-name--{MODEL.replace('/', '__')}--s{seed}"
        run_dir = folder / name
        shutil.copytree(template, run_dir, symlinks=True)
        trace = json.loads((run_dir / "trace.json").read_text())
        trace["config"].update(agent="research", llm=MODEL, seed=seed)
        trace["status"] = status
        if status == "running":
            trace["end_reason"], trace["final_score"] = None, None
        (run_dir / "trace.json").write_text(json.dumps(trace))
        (run_dir / "llm_calls.jsonl").write_text((UNPRICED + "\n") * 3)
    return folder


ROWS = ("return Array.prototype.map.call(document.querySelectorAll('#runs tbody tr'), function (tr) {"
        " var list = document.getElementById('list').getBoundingClientRect();"
        " var cells = Array.prototype.map.call(tr.children, function (td) { return td.textContent; });"
        " var last = tr.children[tr.children.length - 1].getBoundingClientRect();"
        " return {cells: cells, height: tr.getBoundingClientRect().height, right: last.right, edge: list.right}; });")


def test_the_run_list_at_1400_px_and_what_unpriced_and_running_runs_show(runs, tmp_path):
    from mlab.core.view.server import Viewer

    going = next(runs.glob("*--s13"))
    with open(going / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with Viewer(runs) as viewer, Browser(tmp_path / "profile", width=1400, height=900) as browser:
            browser.open(viewer.url)
            browser.wait_for("return document.querySelectorAll('#runs tbody tr').length === 3;", timeout_s=60)
            rows = browser.run(ROWS)
            line = browser.run("return parseFloat(getComputedStyle(document.querySelector('#runs td')).lineHeight)"
                               " || 17;")
            groups = browser.run("return Array.prototype.map.call(document.querySelectorAll('#groups tbody tr'),"
                                 " function (tr) { return Array.prototype.map.call(tr.children,"
                                 " function (td) { return td.textContent; }); });")
    for row in rows:
        assert row["height"] < 3 * line + 12, rows  # the name and one line under it, not 3-5 lines
        assert row["right"] <= row["edge"] + 1, rows  # the last column (cost) in view, not cut off
    by_seed = {r["cells"][0].split("seed ")[-1]: r["cells"] for r in rows}
    assert by_seed["13"][5] == "-" and by_seed["11"][5] in ("yes", "no"), by_seed  # success: none yet while going
    assert all(r["cells"][6] == "unknown" for r in rows), rows
    [group] = groups
    assert "$0.0000" not in group and "unknown" in group, group
    assert group[3].startswith("2/2") or group[3].startswith("0/2"), group  # the run still going is not judged
