"""The hardware a run had is part of its record (issue 42 item 2): its trace, a bench's results.db, the report (a
column, and a note when the runs mix hardware), the viewer and `mlab runs --json`."""
from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from types import SimpleNamespace

import pytest

from mlab.core.hardware import Hardware, machine_gpus, measure, of_run
from mlab.core.view.runs import Catalog
from tests.fixtures.bench_cli import REGISTRY, db_rows
from tests.fixtures.cli import mlab, mlab_in_process

OTHER = {"cpu_model": "Stand-in CPU 9000", "cores": 64, "cores_usable": 8, "memory_bytes": 512 * 2**30,
         "memory_usable_bytes": 64 * 2**30, "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "570.86"}] * 2}
OTHER_LINE = "Stand-in CPU 9000, 8 of 64 cores, 64 of 512 GiB, 2x NVIDIA H100 80GB HBM3 (driver 570.86)"


def _run(run_dir):
    done = mlab_in_process("run", "--task", "lite/wine", "--agent", "baseline", "--run-dir", run_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    return run_dir


def _edit_trace(run_dir, **fields):
    stored = json.loads((run_dir / "trace.json").read_text())
    stored.update(fields)
    (run_dir / "trace.json").write_text(json.dumps(stored))


@pytest.mark.slow  # over 2 s on two cores
def test_a_run_records_its_hardware_and_every_view_shows_it(tmp_path):
    run = _run(tmp_path / "runs" / "a")
    hardware = Hardware.model_validate(json.loads((run / "trace.json").read_text())["hardware"])
    assert hardware.cpu_model.strip() and hardware.cores >= 1 and 0 < hardware.cores_usable <= hardware.cores
    assert 0 < hardware.memory_usable_bytes <= hardware.memory_bytes
    assert hardware.summary() == measure().summary()  # what this machine is
    line = hardware.summary()

    assert Catalog(run).run(".")["hardware"] == line  # the viewer's run header
    listed = mlab_in_process("runs", tmp_path / "runs", "--json")
    assert [r["hardware"] for r in json.loads(listed.stdout)] == [line]

    one = mlab_in_process("report", run, "--out", tmp_path / "report-one", "--no-plots", "--no-html")
    assert one.returncode == 0, one.stderr
    assert f"hardware: {line}" in one.stdout and "kinds of hardware" not in one.stdout

    # A second run on other hardware: the report says they mixed, once, in every output.
    shutil.copytree(run, tmp_path / "runs" / "b", symlinks=True)
    _edit_trace(tmp_path / "runs" / "b", hardware=OTHER)
    out = tmp_path / "report"
    mixed = mlab_in_process("report", tmp_path / "runs", "--out", out, "--no-plots", "--format", "csv")
    assert mixed.returncode == 0, mixed.stderr
    (note,) = [text for text in (mixed.stdout + mixed.stderr).splitlines() if "kinds of hardware" in text]
    assert note.startswith("note: these runs ran on 2 kinds of hardware: ")
    assert f"{line} (1 run)" in note and f"{OTHER_LINE} (1 run)" in note
    assert note in (out / "index.html").read_text()
    assert json.loads((out / "report.json").read_text())["hardware"] == {line: ["a"], OTHER_LINE: ["b"]}
    runs_csv = (out / "tables" / "runs.csv").read_text()
    assert "hardware" in runs_csv.splitlines()[0] and OTHER_LINE in runs_csv


@pytest.mark.slow  # over 2 s on two cores
def test_a_resumed_run_keeps_its_first_record_and_notes_other_hardware(tmp_path):
    run = _run(tmp_path / "run")
    _edit_trace(run, status="running", hardware=OTHER)
    done = mlab_in_process("run", "--resume", run)
    assert done.returncode == 0, done.stdout + done.stderr
    trace = json.loads((run / "trace.json").read_text())
    assert trace["status"] == "finished" and Hardware.model_validate(trace["hardware"]).summary() == OTHER_LINE
    (note,) = [e for e in trace["errors"] if "other hardware" in e]
    assert note == f"resumed on other hardware: {measure().summary()} (the run started on {OTHER_LINE})"


@pytest.mark.slow  # over 2 s on two cores
def test_a_bench_records_each_runs_hardware_and_its_report_notes_a_mix(tmp_path):
    out = tmp_path / "bench"
    done = mlab("bench", "--tasks", "fixture/counter", "--agents", "baseline", "--runs", "2", "--workers", "1",
                "--bench-dir", out, "--registry", REGISTRY, home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    rows = db_rows(out)
    assert len(rows) == 2
    for row in rows:
        traced = json.loads((out / row["run_dir"] / "trace.json").read_text())["hardware"]
        assert row["hardware"] == Hardware.model_validate(traced).summary()
    same = mlab("report", out, "--no-plots", "--no-html", home=tmp_path / "home")
    assert same.returncode == 0 and f"hardware: {rows[0]['hardware']}" in same.stdout, same.stderr
    with sqlite3.connect(out / "results.db") as conn:
        conn.execute("UPDATE runs SET hardware = ? WHERE key = ?", (OTHER_LINE, rows[1]["key"]))
    mixed = mlab("report", out, "--no-plots", "--no-html", home=tmp_path / "home")
    assert mixed.returncode == 0, mixed.stderr
    assert "note: these runs ran on 2 kinds of hardware: " in mixed.stdout and OTHER_LINE in mixed.stdout


def test_gpus_come_from_nvidia_smi_and_a_failing_one_records_none(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho '0, 3, GPU-aaa, NVIDIA H200, 570.86.15, 143771'\n"  # /dev/nvidia3
                   "echo '1, 5, GPU-bbb, NVIDIA H200, 570.86.15, 143771'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [(g.name, g.index, g.driver) for g in machine_gpus()] == [("NVIDIA H200", 0, "570.86.15"),
                                                                     ("NVIDIA H200", 1, "570.86.15")]
    assert measure().summary().endswith(", 2x NVIDIA H200 (driver 570.86.15)")
    assert measure(gpus=["GPU-bbb"]).gpus[0].index == 1 and len(measure(gpus=1).gpus) == 1
    assert [g.index for g in measure(gpus=[5]).gpus] == [1]  # a grant names device nodes
    # a run's slice of the machine as RunConfig.compute gives it (the bench's --cpus-per-run, --gpus-per-run)
    granted = SimpleNamespace(compute=SimpleNamespace(cpus=4, cpu_set=[0], gpus=[3], memory_bytes=2**30))
    cores, memory, gpus = of_run(granted).summary().split(", ")[1:]
    assert (cores, gpus) == (f"1 of {measure().cores} cores", "1x NVIDIA H200 (driver 570.86.15)")
    assert memory.startswith("1 of ") and of_run(granted).memory_usable_bytes == 2**30
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # what the run's code sees
    assert [g.index for g in measure().gpus] == [1]
    assert measure(cpus=1).summary().split(", ")[1] == f"1 of {measure().cores} cores"

    broken = tmp_path / "broken" / "nvidia-smi"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    broken.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{broken.parent}:/usr/bin:/bin")
    assert measure().gpus == [] and measure().summary().endswith(", no GPU")
