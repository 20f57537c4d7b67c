"""`make run`'s set-up says each install stage as it starts, and each package pip collects and installs
(the whole output stays in the setup log)."""
from __future__ import annotations

import shlex
import subprocess

from tests.fixtures.cli import REPO


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


CANNED_PIP = """\
Collecting numpy==2.1.0
  Downloading numpy-2.1.0-cp311-cp311-manylinux_2_17_x86_64.whl (16.3 MB)
Requirement already satisfied: packaging in ./.venv/lib/python3.11/site-packages (from torch) (24.1)
Collecting scipy
  Using cached scipy-1.14.0-cp311-cp311-manylinux_2_17_x86_64.whl (41.1 MB)
Building wheels for collected packages: mlab
  Building wheel for mlab (pyproject.toml): started
Installing collected packages: numpy, scipy, mlab
Successfully installed mlab-0.1.0 numpy-2.1.0 scipy-1.14.0
"""


def test_make_run_shows_each_package_pip_collects_and_installs(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "pip.txt").write_text(CANNED_PIP)
    # a stand-in venv python: pip's output as pip prints it, or nothing under -q (as pip does)
    stand_in = f'#!/bin/bash\ncase " $* " in *" -q "*) exit 0;; *"pip install"*) cat {tmp_path}/pip.txt;; esac\n'
    for name in ("python", "mlab"):
        (venv / "bin" / name).write_text(stand_in)
        (venv / "bin" / name).chmod(0o755)
    made = subprocess.run(["make", "--no-print-directory", "run", f"VENV={venv}", "LITE_TASKS=",
                           f"SETUP_LOG={tmp_path / 'setup.log'}", f"DEMO_DIR={tmp_path / 'demo'}"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    shown = [line.split(": ", 1)[1] for line in made.stdout.splitlines() if line.startswith("  ") and " s: " in line]
    stages = [line for line in shown if line.startswith("pip install")]
    assert len(stages) >= 5, made.stdout
    for package in ("collecting numpy==2.1.0", "collecting scipy", "building wheel for mlab",
                    "installing numpy, scipy, mlab"):
        assert sum(line.strip() == package for line in shown) == len(stages), (package, made.stdout)
    assert not any("Requirement already satisfied" in line or "Downloading" in line for line in shown), made.stdout
    assert all(len(line) <= 88 for line in shown), made.stdout
    assert "Successfully installed" in (tmp_path / "setup.log").read_text()  # the whole output stays in the log
