"""Screenshots of `mlab view` for the README, taken by a headless Chromium: a run in progress, a finished run
and a bench. The runs come from the test fixtures (a fixture task and agents, a scripted policy model).

    .venv/bin/python docs/viewer_screenshots.py      # from the repository root; needs chromium and chromedriver

Writes docs/images/viewer-{in-progress,finished,bench}.png.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlab.core.view.server import Viewer  # noqa: E402 (after the path that finds the fixtures)
from tests.fixtures.gated_run import GATES_VARIABLE  # noqa: E402
from tests.fixtures.webdriver import Browser  # noqa: E402

OUT = REPO / "docs" / "images"
WIDTH, HEIGHT = 1280, 800


def cli(fixtures: str, *args: object, env: dict[str, str], wait: bool = True) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", f"tests.fixtures.{fixtures}", "mlab", *map(str, args)], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if wait and proc.wait() != 0:
        raise SystemExit(f"mlab {' '.join(map(str, args))} failed")
    return proc


def wait_for(check, what: str, timeout_s: float = 120):
    deadline = time.monotonic() + timeout_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}")
        time.sleep(0.1)
    return value


def live_output(run_dir: Path) -> str:
    try:
        return str(json.loads((run_dir / "live.json").read_text()).get("output_tail", ""))
    except (OSError, ValueError):
        return ""


def shoot(browser: Browser, url: str, ready: str, name: str) -> None:
    browser.open(url)
    browser.wait_for(ready)
    time.sleep(1.2)  # one more poll, so the elapsed ticker and the status line are drawn
    path = OUT / name
    browser.screenshot(path)
    print(f"{path.relative_to(REPO)}: {path.stat().st_size // 1024} KB")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        gates, runs, bench = tmp / "gates", tmp / "runs", tmp / "bench"
        gates.mkdir()
        env = {**os.environ, "MLAB_HOME": str(tmp / "home"), GATES_VARIABLE: str(gates), "COLUMNS": "200"}
        cli("agents_fixtures", "run", "--task", "fixture/tiny-clf", "--llm", "fixture-policy", "--agent", "research",
            "--max-steps", "5", "--run-dir", runs / "research-on-tiny-clf", env=env)
        cli("gated_run", "bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,fixture-scenario",
            "--runs", "3", "--workers", "2", "--intermediate", "--bench-dir", bench, "--registry",
            "tests.fixtures.gated_run:gated_registry", env=env)
        in_progress = runs / "gated-on-counter"
        run = cli("gated_run", "run", "--task", "fixture/counter", "--agent", "fixture-gated", "--run-dir",
                  in_progress, env=env, wait=False)
        try:
            (gates / "step1").touch()
            wait_for(lambda: (in_progress / "snapshots" / "step_0001.json").exists(), "step 1")
            (in_progress / "workspace" / "hold.txt").write_text("1")
            (gates / "step2").touch()
            wait_for(lambda: "epoch 3" in live_output(in_progress), "the script's output")
            with Viewer(runs) as viewer, Browser(tmp / "profile", WIDTH, HEIGHT) as browser:
                shoot(browser, viewer.url + "#run=gated-on-counter",
                      "return document.getElementById('live-output');", "viewer-in-progress.png")
                shoot(browser, viewer.url + "#run=research-on-tiny-clf&step=1",
                      "return document.getElementById('step-calls');", "viewer-finished.png")
            with Viewer(bench) as viewer, Browser(tmp / "profile2", WIDTH, HEIGHT) as browser:
                listed = json.load(urllib.request.urlopen(viewer.url + "api/runs"))["runs"]
                chosen = next(r["id"] for r in listed if r.get("agent") == "fixture-appender")
                shoot(browser, viewer.url + f"#run={chosen}&step=3",
                      "return document.querySelector('#score-chart circle');", "viewer-bench.png")
        finally:
            (in_progress / "workspace" / "release.txt").write_text("1")
            for n in (3, 4):
                (gates / f"step{n}").touch()
            run.wait(timeout=120)


if __name__ == "__main__":
    main()
