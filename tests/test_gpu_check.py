"""`make gpu-check` (benchmarks/gpu_check/) without a GPU: the one-line exit 3, bad options, the report's pure
functions, and the checks' own paths run on the CPU (--device cpu) through the real sandboxes."""
from __future__ import annotations

import importlib.util
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core.sandbox.local import LocalSandbox

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "benchmarks" / "gpu_check"
CHECK = FOLDER / "check.py"


def load_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", CHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gc = load_check()


def run_check(*args: str, path: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, str(CHECK), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=REPO)


def bin_without_nvidia_smi(folder: Path, *tools: str) -> str:
    """A PATH of links to the given tools only: no nvidia-smi, whatever this machine has."""
    folder.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} is not installed")
        (folder / tool).symlink_to(found)
    return str(folder)


# ---- no GPU ----------------------------------------------------------------------------------------
def test_without_nvidia_smi_the_check_exits_3_with_one_line(tmp_path):
    result = run_check(path=bin_without_nvidia_smi(tmp_path / "bin"))
    assert result.returncode == 3, result
    assert result.stdout.count("\n") == 1 and not result.stderr, result
    assert result.stdout.startswith("gpu-check: no GPU here (no nvidia-smi on PATH)")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_torch_without_cuda_exits_3_with_one_line_even_where_nvidia_smi_is(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: not really'\n")
    (fake / "nvidia-smi").chmod(0o755)
    result = run_check(path=f"{fake}:{os.environ['PATH']}")
    assert result.returncode == 3, result
    assert result.stdout.count("\n") == 1 and not result.stderr, result
    assert "sees no CUDA device" in result.stdout


def test_run_sh_and_make_target_stop_at_once_without_a_gpu(tmp_path):
    """Before any set-up: the one line and code 3 (make reports its recipe's 3 as "Error 3" and exits 2)."""
    path = bin_without_nvidia_smi(tmp_path / "bin", "bash", "dirname", "basename", "make")
    env = {**os.environ, "PATH": path}
    script = subprocess.run(["bash", str(FOLDER / "run.sh")], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=60)
    assert (script.returncode, script.stdout, script.stderr) == (
        3, "gpu-check: no GPU here (no nvidia-smi on PATH); nothing was checked\n", ""), script
    made = subprocess.run(["make", "-s", "gpu-check"], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=60)
    assert made.returncode == 2 and made.stdout == script.stdout, made
    assert "Error 3" in made.stderr
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize("args, message", [
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--only", "cifar10,nope"], "'cifar10,nope': choose from cuda-step, cifar10, llama"),
    (["--sandboxes", ""], "choose from local, bwrap, docker"),
    (["--cifar-per-batch", "0"], "'0' is not a positive whole number"),
    (["--budget", "ten"], "'ten' is not a positive whole number"),
    (["stray"], "unrecognized arguments: stray"),
])
def test_bad_options_are_one_line_and_exit_2(args, message):
    result = run_check(*args)
    assert result.returncode == 2, result
    assert result.stdout == "" and result.stderr.count("\n") == 1 and message in result.stderr, result


# ---- the report ------------------------------------------------------------------------------------
def results(*statuses: str) -> list:
    return [gc.Result(f"check {i}", status, 1.25 * i, f"detail {i}", log=f"log {i}")
            for i, status in enumerate(statuses)]


@pytest.mark.parametrize("statuses, code", [
    ((), 0), (("passed",), 0), (("passed", "skipped"), 0), (("skipped", "skipped"), 0),
    (("passed", "failed", "skipped"), 1), (("failed",), 1),
])
def test_exit_code_is_1_only_when_a_check_failed(statuses, code):
    assert gc.exit_code(results(*statuses)) == code


def test_table_has_a_row_per_check_in_aligned_columns():
    rows = results("passed", "failed", "skipped")
    rows[2].check = "a much longer check name"
    table = gc.format_table(rows).splitlines()
    assert table[0].split() == ["check", "result", "seconds", "detail"]
    assert [line.split("  ")[0].strip() for line in table[1:]] == ["check 0", "check 1", "a much longer check name"]
    width = len("a much longer check name") + 2
    assert [line[width:].split()[:3] for line in table[1:]] == [
        ["passed", "0.0", "detail"], ["failed", "1.2", "detail"], ["skipped", "2.5", "detail"]]
    assert gc.summary(rows) == "gpu-check: 1 passed, 1 failed, 1 skipped"
    assert gc.failure_logs(rows) == "---- check 1: failed ----\nlog 1"


def test_step_verdict_wants_the_device_asked_for_and_a_falling_loss():
    line = ('{"device": "NVIDIA H100", "on_cuda": true, "torch": "2.11.0", "first_loss": 2.0, "last_loss": 0.5, '
            '"steps": 20}')
    ok, shown = gc.step_verdict(f"The script ran. Output:\n{line}\n", "cuda")
    assert ok and shown == "NVIDIA H100, loss 2 -> 0.5 in 20 steps, torch 2.11.0"
    assert gc.step_verdict(line, "cpu")[0] is False
    assert gc.step_verdict(line.replace('"last_loss": 0.5', '"last_loss": 2.5'), "cuda") == \
        (False, "the loss did not go down: NVIDIA H100, loss 2 -> 2.5 in 20 steps, torch 2.11.0")
    assert gc.step_verdict("Traceback (most recent call last): ...", "cuda") == (False, "the step printed no result")


# ---- what the checks feed the tasks ----------------------------------------------------------------
def test_one_epoch_edits_a_copy_of_the_real_cifar10_starter(tmp_path):
    from mlab_tasks_mlagentbench.base import FILES_DIR

    script = tmp_path / "train.py"
    shutil.copyfile(FILES_DIR / "cifar10" / "train.py", script)
    gc.one_epoch(script)
    source = script.read_text()
    compile(source, str(script), "exec")
    assert "\nepochs = 1\n" in source and "\nepochs = 5\n" not in source
    assert source.count(gc.DEVICE_LINE) == 1
    script.write_text("print('no epochs here')\n")
    with pytest.raises(RuntimeError, match="no longer has one `epochs = N` line"):
        gc.one_epoch(script)


def test_generated_cifar_passes_the_tasks_own_check(tmp_path):
    from mlab_tasks_mlagentbench.tasks.cifar10 import FOLDER as CIFAR_FOLDER
    from mlab_tasks_mlagentbench.tasks.cifar10 import check_batches

    notes: list[str] = []
    gc.make_cifar(tmp_path, per_batch=30)
    check_batches(tmp_path, log=notes.append)
    assert notes and "[30, 30, 30, 30, 30, 30]" in notes[0]  # the real shape but for the count
    with open(tmp_path / CIFAR_FOLDER / "data_batch_1", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    assert batch[b"data"].shape == (30, 3072) and len(batch[b"labels"]) == 30


def _slice_run(gpu: int, seen: list[str], span: tuple[float, float], count: int = 1) -> dict:
    probe = {"seen": seen, "cuda": str(gpu), "count": count, "on_cuda": count > 0, "t0": span[0], "t1": span[1]}
    return {"run": f"r{gpu}-{span[0]}", "status": "finished", "gpus": [gpu], "probe": probe, "end_reason": ""}


def test_gpu_slices_verdict_wants_each_run_alone_on_the_gpu_it_was_granted():
    verdict = gc.slices_module().verdict
    one = {0: "/dev/nvidia0"}
    two = {0: "/dev/nvidia0", 1: "/dev/nvidia1"}
    waited = [_slice_run(0, ["/dev/nvidia0"], (0, 1)), _slice_run(0, ["/dev/nvidia0"], (1, 2))]
    assert verdict(waited, "cuda", one)[0]
    assert verdict([_slice_run(0, ["/dev/nvidia0"], (0, 2)), _slice_run(1, ["/dev/nvidia1"], (0, 2))], "cuda", two)[0]
    overlapped = [_slice_run(0, ["/dev/nvidia0"], (0, 2)), _slice_run(0, ["/dev/nvidia0"], (1, 3))]
    assert verdict(overlapped, "cuda", one) == (False, "two runs held one GPU at once: [(0, 2), (1, 3)]")
    saw_both = [_slice_run(0, ["/dev/nvidia0", "/dev/nvidia1"], (0, 1)), _slice_run(1, ["/dev/nvidia1"], (0, 1))]
    assert "its sandbox showed" in verdict(saw_both, "cuda", two)[1]
    assert not verdict(waited, "cuda", two)[0]  # two GPUs free, yet one run waited for the other's
    torch_saw_two = [_slice_run(0, ["/dev/nvidia0"], (0, 1), count=2), _slice_run(0, ["/dev/nvidia0"], (1, 2))]
    assert "torch saw 2 GPUs" in verdict(torch_saw_two, "cuda", one)[1]
    assert verdict([_slice_run(0, ["/dev/nvidia0"], (0, 1), count=0)] * 2, "cpu", one)[1].startswith("two runs")


# ---- the checks on the CPU, through the real sandboxes ---------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not LocalSandbox.available()[0], reason="the local sandbox is not available here")
def test_cuda_step_runs_as_agent_code_in_the_local_sandbox_on_the_cpu():
    result = run_check("--device", "cpu", "--only", "cuda-step", "--sandboxes", "local")
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("cuda step [local]"))
    assert row.split()[3] == "passed" and "cpu, loss" in row, row
    assert result.stdout.rstrip().endswith("gpu-check: 1 passed, 0 failed, 0 skipped")


@pytest.mark.slow
def test_cifar10_and_llama_checks_run_in_the_default_sandbox_on_the_cpu():
    result = run_check("--device", "cpu", "--only", "cifar10,llama", "--cifar-per-batch", "200",
                       "--llama-lines", "110", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith(("cifar10", "llama"))}
    assert "passed" in rows["cifar10"] and "test accuracy" in rows["cifar10"], rows
    assert "passed" in rows["llama-inference"] and "over 8 timed runs" in rows["llama-inference"], rows
    assert "clock cpu" in rows["llama-inference"], rows


@pytest.mark.slow
def test_gpu_slices_check_leases_stand_in_devices_on_the_cpu():
    result = run_check("--device", "cpu", "--only", "gpu-slices")
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("gpu-slices"))
    assert row.split()[1] == "passed", row
    assert "GPU 0 (nvidia0, CUDA_VISIBLE_DEVICES=0); GPU 1 (nvidia1, CUDA_VISIBLE_DEVICES=1)" in row, row
