"""`mlab view` of a folder not made yet waits for it and serves it once it appears."""
from __future__ import annotations

import subprocess
import time

from tests.fixtures.cli import REPO, cli_env, entry


def test_view_of_a_folder_not_made_yet_waits_for_it(tmp_path):
    later = tmp_path / "runs" / "later"
    proc = subprocess.Popen([*entry("mlab.cli.main"), "view", str(later)], cwd=REPO, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert "does not exist yet" in first and "waiting" in first, first
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting, not refused
        later.mkdir(parents=True)
        deadline = time.monotonic() + 60
        seen = ""
        while "open http://127.0.0.1:" not in seen and time.monotonic() < deadline:
            seen += proc.stdout.readline()
        assert "open http://127.0.0.1:" in seen, seen
    finally:
        proc.kill()
        proc.wait()
