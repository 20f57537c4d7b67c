"""`make gpu-check`: does agent code reach the GPU through mlab's own machinery? Run on a machine with one NVIDIA
GPU (the Makefile target builds the environment first; see there).

Checks, each a row of the one table printed at the end:
  cuda step [SANDBOX]   a few training steps of a small torch model on the device, run by Execute Script inside
                        each of mlab's sandboxes (local, bwrap, docker); one that is not available here is skipped
                        with the reason its available() gives
  cifar10               the cifar10 task prepared from generated data of CIFAR-10's shape (no network needed), its
                        starter train.py run for one epoch by Execute Script in the default sandbox (`auto`), then
                        scored by the task
  llama-inference       the task's own timing (its evaluate: the starter against itself, 4 pairs of timed runs in
                        the scoring sandbox, the default one) on a tiny randomly initialised Llama model built here
  gpu-slices            a two-run `mlab bench --gpus-per-run 1` (gpu_slices.py): each run's sandbox shows only the
                        GPU it was granted, torch sees one GPU and computes on it, and no GPU is held by two runs at
                        once (on a one-GPU machine the second run waits)
Where no confining sandbox is available, the last two run `unconfined` and say so.

Exit codes: 0 every check that could run passed, 1 one failed, 2 bad options, 3 no GPU (one line, nothing run).

    python benchmarks/gpu_check/check.py [--device cpu] [--only cuda-step,cifar10,llama,gpu-slices] [--sandboxes local]
        [--cifar-per-batch N] [--llama-lines N] [--budget SECONDS] [--log-dir DIR]

--device cpu runs the same checks on the CPU (a dry run of the whole path on a machine without a GPU); gpu-slices
then leases stand-in device nodes.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
OK, FAILURE, BAD_INPUT, NO_GPU = 0, 1, 2, 3
SANDBOXES = ("local", "bwrap", "docker")
CHECKS = ("cuda-step", "cifar10", "llama", "gpu-slices")
# Only what the checks use: a plugin whose requirements are not installed (litellm on a bare GPU machine) must
# not turn into load errors here. "local" is mlab's built-in plugin (local and unconfined sandboxes).
PLUGINS = ("local", "bwrap", "docker", "mlagentbench")
CIFAR_IMAGES = 10_000  # per batch, as in the original: 5 training batches and a test batch
LLAMA_LINES = 420  # long lines of text: the starter's 100 batches of 4 samples, and a few more
# Per-command time limits (further cut to what is left of --budget): enough for a cold CUDA start.
STEP_TIMEOUT_S = 240.0
CIFAR_TIMEOUT_S = 360.0
LLAMA_TIMEOUT_S = 180.0
SLICES_TIMEOUT_S = 300.0  # the whole two-run bench: two cold CUDA starts, one after the other on one GPU
LOG_TAIL = 2500  # characters of a failed check's output shown above the table (all of it goes to --log-dir)


@dataclass
class Result:
    check: str
    status: str  # PASSED, FAILED or SKIPPED
    seconds: float
    detail: str
    log: str = ""  # what the check's commands printed: shown above the table when it failed


# ---- the report: pure functions ------------------------------------------------------------------
def exit_code(results: Sequence[Result]) -> int:
    """0 when every check that could run passed (skipped ones aside), 1 when one failed."""
    return FAILURE if any(r.status == FAILED for r in results) else OK


def format_table(results: Sequence[Result]) -> str:
    headers = ("check", "result", "seconds", "detail")
    rows = [(r.check, r.status, f"{r.seconds:.1f}", r.detail) for r in results]
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(3)]
    lines = []
    for row in [headers, *rows]:
        lines.append(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}".rstrip())
    return "\n".join(lines)


def summary(results: Sequence[Result]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in (PASSED, FAILED, SKIPPED)}
    return "gpu-check: " + ", ".join(f"{n} {status}" for status, n in counts.items())


def failure_logs(results: Sequence[Result]) -> str:
    blocks = [f"---- {r.check}: {r.status} ----\n{r.log[-LOG_TAIL:].rstrip()}" for r in results
              if r.status == FAILED and r.log.strip()]
    return "\n".join(blocks)


def write_logs(folder: Path, results: Sequence[Result]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for r in results:
        name = re.sub(r"[^a-z0-9]+", "-", r.check.lower()).strip("-")
        (folder / f"{name}.log").write_text(f"{r.check}: {r.status} ({r.detail})\n{r.log}", encoding="utf-8")


def step_verdict(output: str, device: str) -> tuple[bool, str]:
    """Whether the CUDA step's output proves it trained on the device asked for, and what it showed."""
    lines = [line for line in output.splitlines() if line.startswith("{") and '"last_loss"' in line]
    if not lines:
        return False, "the step printed no result"
    try:
        found = json.loads(lines[-1])
        first, last = float(found["first_loss"]), float(found["last_loss"])
    except (ValueError, KeyError, TypeError):
        return False, f"the step printed {lines[-1][:120]!r}"
    shown = f"{found.get('device')}, loss {first:.4g} -> {last:.4g} in {found.get('steps')} steps, " \
            f"torch {found.get('torch')}"
    if bool(found.get("on_cuda")) != (device == "cuda"):
        return False, f"ran on the wrong device: {shown}"
    if not last < first:
        return False, f"the loss did not go down: {shown}"
    return True, shown


# ---- options -------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        self.exit(BAD_INPUT, f"gpu-check: {message} (see --help)\n")


def _names(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(allowed)}")
        return names
    return parse


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="gpu_check", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: the same checks without a GPU (a dry run)")
    parser.add_argument("--only", type=_names(CHECKS), default=list(CHECKS), help=",".join(CHECKS))
    parser.add_argument("--sandboxes", type=_names(SANDBOXES), default=list(SANDBOXES),
                        help="for the cuda step: " + ",".join(SANDBOXES))
    parser.add_argument("--cifar-per-batch", type=_positive, default=CIFAR_IMAGES,
                        help=f"generated images per CIFAR-10 batch (default {CIFAR_IMAGES}, the original's)")
    parser.add_argument("--llama-lines", type=_positive, default=LLAMA_LINES, help="lines of generated text")
    parser.add_argument("--budget", type=_positive, default=400,
                        help="seconds for all checks; a check that would start later is skipped")
    parser.add_argument("--log-dir", type=Path, help="write what each check's commands printed here")
    args = parser.parse_args(argv)
    if args.log_dir is not None and args.log_dir.exists() and not args.log_dir.is_dir():
        parser.error(f"--log-dir {args.log_dir} is not a folder")
    return args


# ---- is there a GPU? -----------------------------------------------------------------------------
_PROBE = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
          "'available': torch.cuda.is_available()}))")


def gpu_probe() -> tuple[str | None, str]:
    """(why this machine cannot run the checks on a GPU or None, what it has). torch is asked in a child
    process: the harness itself stays without CUDA."""
    if shutil.which("nvidia-smi") is None:
        return "no nvidia-smi on PATH", ""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
        probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"asking nvidia-smi and torch about CUDA failed: {exc}", ""
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"torch is not importable by {sys.executable}: {last}", ""
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    has = f"torch {found['torch']} (CUDA {found['cuda']}) in {sys.executable}; " + \
        "; ".join(listed.strip().splitlines()[:2])
    if not found["available"]:
        return f"torch {found['torch']} (CUDA build: {found['cuda']}) sees no CUDA device", has
    return None, has


# ---- the checks ----------------------------------------------------------------------------------
class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def timeout(self, wanted: float) -> float:
        return max(1.0, min(wanted, self.left()))


Outcome = tuple[str, str, str]  # (status, detail, log): what one check found


def timed(check: str, budget: Budget, run: Callable[[], Outcome]) -> Result:
    """Run one check; an exception is a failure with its traceback as the log."""
    if budget.left() <= 5:
        return Result(check, SKIPPED, 0.0, "out of time (--budget)")
    print(f"gpu-check: {check} ...", flush=True)
    started = time.monotonic()
    try:
        status, detail, log = run()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        status, detail, log = FAILED, f"{type(exc).__name__}: {first}", traceback.format_exc()
    return Result(check, status, time.monotonic() - started, detail, log)


def show_python_to_sandboxes(scratch: Path) -> list[str]:
    """Folders of this interpreter's packages (torch above all) that the sandboxes would not show, added to
    MLAB_SANDBOX_RO: where python3 is itself a venv, this check's venv reaches its packages through a .pth file
    (run.sh), and agent code must see them too."""
    from mlab.core import ExecSpec, root_view
    from mlab.core.sandbox.rootfs import inside

    shown = root_view([sys.executable], ExecSpec(cwd=scratch)).shown()
    extra: list[str] = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if ("site-packages" in real or "dist-packages" in real) and os.path.isdir(real) \
                and not any(inside(s, real) for s in shown + extra):
            extra.append(real)
    if extra:
        os.environ["MLAB_SANDBOX_RO"] = ":".join(filter(None, [os.environ.get("MLAB_SANDBOX_RO", ""), *extra]))
    return extra


def sandbox_class(registry: Any, name: str) -> tuple[Any, str]:
    """(the sandbox class, "") when it can run here, else (None, why not)."""
    from mlab.core import MlabError

    try:
        cls = registry.get("sandboxes", name)
    except MlabError as exc:
        return None, str(exc)
    ok, why = cls.available()
    if not ok and name == "docker" and "has no image" in why:
        # The image is an empty root imported offline (the docker sandbox's own build-image).
        from mlab_sandbox_docker.engine import DEFAULT_IMAGE, IMAGE_VAR, build_image

        try:
            build_image(os.environ.get(IMAGE_VAR) or DEFAULT_IMAGE)
        except RuntimeError as exc:
            return None, f"{why}; building it failed: {exc}"
        ok, why = cls.available()
    return (cls, "") if ok else (None, why)


def execute_script(sandbox: Any, workspace: Path, root: Path, script: str, limits: Any) -> tuple[str, bool]:
    """(observation, is_error) of Execute Script of a workspace script, as an agent's step runs it."""
    from mlab.core import Action
    from mlab.core.run.environment import Environment, EnvSettings
    from mlab.core.run.snapshot import SnapshotStore

    (root / "hidden").mkdir(parents=True, exist_ok=True)
    env = Environment(EnvSettings(
        workspace=workspace, read_only_patterns=[], sandbox=sandbox, store=SnapshotStore(root / "store"),
        hidden_paths=[root / "hidden"], sandbox_home=root / "home", limits=limits))
    try:
        return env.execute(Action(name="Execute Script", args={"script_name": script}))
    finally:
        env.close()


def cuda_step(registry: Any, name: str, device: str, root: Path, budget: Budget) -> Outcome:
    cls, why = sandbox_class(registry, name)
    if cls is None:
        return SKIPPED, why, ""
    from mlab.core import Limits

    def attempt(cls: Any, folder: Path, limits: Any) -> tuple[bool, str, str]:
        workspace = folder / "workspace"
        workspace.mkdir(parents=True)
        source = (HERE / "cuda_step.py").read_text(encoding="utf-8")
        (workspace / "cuda_step.py").write_text(source.replace('DEVICE = "cuda"', f'DEVICE = "{device}"', 1),
                                                encoding="utf-8")
        sandbox = cls()
        try:
            observation, is_error = execute_script(sandbox, workspace, folder, "cuda_step.py", limits)
        finally:
            sandbox.close()
        ok, shown = step_verdict(observation, device)
        if is_error:
            return False, f"Execute Script failed ({shown})", observation
        return ok, shown, observation

    limits = Limits(timeout_s=budget.timeout(STEP_TIMEOUT_S))  # mlab's default limits, as a run has them
    ok, shown, observation = attempt(cls, root / "default-limits", limits)
    if ok:
        return PASSED, shown, observation
    # Diagnoses, never a pass: a memory limit that refused CUDA's start (an address-space limit did, before the
    # limit became RLIMIT_DATA); and a step that fails unconfined too is not the confinement's doing.
    detail, log = [shown], [observation[-LOG_TAIL // 2:]]
    gib = f"{limits.memory_bytes / 2**30:g} GiB" if limits.memory_bytes else "no"
    unconfined, _why = sandbox_class(registry, "unconfined")
    for label, diagnose_cls in ((f"without the {gib} memory limit", cls), ("unconfined without it", unconfined)):
        if diagnose_cls is None or budget.left() < 30:
            break
        retry_ok, _shown, output = attempt(diagnose_cls, root / label.replace(" ", "-"), limits.model_copy(
            update={"memory_bytes": None, "timeout_s": budget.timeout(STEP_TIMEOUT_S)}))
        detail.append(f"{'passes' if retry_ok else 'fails'} {label}")
        log.append(f"---- again, {label} ----\n{output[-LOG_TAIL // 2:]}")
        if retry_ok:
            break
    return FAILED, "; ".join(detail), "\n".join(log)


def default_harness(registry: Any, home: Any) -> tuple[Any, str]:
    """A harness in the default sandbox (`auto`, as `mlab run` picks it), and a note when none confining is
    available here and the check falls back to `unconfined` (the GPU is still what is checked)."""
    from mlab.core import MlabError
    from mlab.core.run.harness import Harness

    harness = Harness(registry, home=home)
    try:
        harness.sandbox_cls  # noqa: B018 (resolves `auto` now)
        return harness, ""
    except MlabError as exc:
        fallback = Harness(registry, home=home, sandbox="unconfined")
        return fallback, f"auto: {exc}; ran unconfined"


def make_cifar(folder: Path, per_batch: int, seed: int = 0) -> Path:
    """CIFAR-10 as the original ships it unpacked (cifar-10-batches-py/: 5 training batches, a test batch and
    batches.meta, python pickles of uint8 images of 3,072 values), from a seed: class c is a blocky colour
    pattern of its own under noise, which the starter's CNN learns within an epoch. Low contrast (grey +-15): with
    stronger patterns the starter's SGD (lr 0.1, momentum 0.9) often diverges to chance."""
    import pickle

    import numpy as np

    rng = np.random.default_rng(seed)
    root = folder / "cifar-10-batches-py"
    root.mkdir(parents=True)
    patterns = (128 + rng.uniform(-15, 15, (10, 3, 4, 4))).repeat(8, axis=2).repeat(8, axis=3).reshape(10, 3072)

    def batch(label: str, n: int) -> dict:
        labels = rng.integers(0, 10, n)
        noise = rng.standard_normal((n, 3072), dtype=np.float32) * 30
        images = np.clip(patterns[labels].astype(np.float32) + noise, 0, 255).astype(np.uint8)
        return {b"batch_label": label.encode(), b"labels": labels.tolist(), b"data": images,
                b"filenames": [f"{label}_{i}.png".encode() for i in range(n)]}

    for i in range(1, 6):
        with open(root / f"data_batch_{i}", "wb") as f:
            pickle.dump(batch(f"training batch {i} of 5", per_batch), f, protocol=2)
    with open(root / "test_batch", "wb") as f:
        pickle.dump(batch("testing batch 1 of 1", per_batch), f, protocol=2)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    with open(root / "batches.meta", "wb") as f:
        pickle.dump({b"num_cases_per_batch": per_batch, b"label_names": names, b"num_vis": 3072}, f, protocol=2)
    return folder


DEVICE_LINE = "gpu-check device:"


def one_epoch(script: Path) -> None:
    """The starter has no epoch option: its workspace copy gets `epochs = 1` in place of its own count, and a
    line after its device choice that prints the device, so the output shows where it trained."""
    source = script.read_text(encoding="utf-8")
    source, epochs = re.subn(r"^epochs = \d+$", "epochs = 1", source, flags=re.M)
    source, devices = re.subn(
        r"^(device = torch\.device\(.*\)\n)",
        rf'\1print("{DEVICE_LINE}", torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")\n',
        source, flags=re.M)
    if epochs != 1 or devices != 1:
        raise RuntimeError(f"{script.name} no longer has one `epochs = N` line ({epochs}) and one "
                           f"`device = torch.device(...)` line ({devices}); the check must follow it")
    script.write_text(source, encoding="utf-8")


def cifar10(registry: Any, home: Any, device: str, root: Path, per_batch: int,
            budget: Budget) -> Outcome:
    from mlab.core.run.snapshot import SnapshotStore

    harness, note = default_harness(registry, home)
    task = harness.task("mlagentbench/cifar10")
    task.check_runnable()
    notes: list[str] = []
    harness.prepare(task, data_dir=make_cifar(root / "source", per_batch), log=notes.append)
    workspace = harness.new_workspace(task, root / "workspace")
    one_epoch(workspace / "train.py")
    sandbox = harness.new_sandbox()
    env = harness.environment(task, workspace, store=SnapshotStore(root / "store"), sandbox_home=root / "home",
                              timeout_s=budget.timeout(CIFAR_TIMEOUT_S), sandbox=sandbox)
    if device == "cpu":
        env.s.extra_env["CUDA_VISIBLE_DEVICES"] = ""  # the starter takes cuda:0 whenever it can
    from mlab.core import Action

    started = time.monotonic()
    try:
        observation, is_error = env.execute(Action(name="Execute Script", args={"script_name": "train.py"}))
    finally:
        env.close()
        sandbox.close()
    seconds = time.monotonic() - started
    where = harness.sandbox_name + (f" ({note})" if note else "")
    shown = [line.split(DEVICE_LINE, 1)[1].strip() for line in observation.splitlines() if DEVICE_LINE in line]
    accuracy = [line.strip() for line in observation.splitlines() if "Train Accuracy" in line]
    if is_error:
        return FAILED, f"train.py failed in {where}", observation
    if not shown or (shown[-1] == "cpu") != (device == "cpu"):
        return FAILED, f"train.py ran on {shown[-1] if shown else 'an unknown device'}, not {device}", \
            observation
    score, why = harness.scorer.score_folder(task, workspace)
    if score is None:
        return FAILED, f"scoring failed: {why}", observation
    train = accuracy[-1].split(":", 1)[-1].strip() if accuracy else "?"
    return PASSED, (f"{shown[-1]} in {where}: train.py (1 epoch of {5 * per_batch:,} images) {seconds:.1f} s, "
                    f"train accuracy {train}, test accuracy {score:.3f}"), observation


def llama(registry: Any, home: Any, device: str, root: Path, lines: int, budget: Budget) -> Outcome:
    from mlab.core import InvalidSubmission, ScoringContext
    from mlab.core.task_context import scoring_with

    harness, note = default_harness(registry, home)
    task = type(harness.task("mlagentbench/llama-inference"))()  # an instance of its own: the settings below
    task.most_pairs = 4  # the fewest pairs its timing allows: 8 timed runs
    # Each timed run's limit; the runs together stop at the budget (Recording below).
    task.scoring_timeout_s = max(30.0, min(LLAMA_TIMEOUT_S, budget.left() / 4))
    task.check_runnable()
    source = root / "source"
    made = subprocess.run([sys.executable, str(HERE / "tiny_llama.py"), str(source), str(lines)],
                          capture_output=True, text=True, timeout=budget.timeout(300))
    if made.returncode != 0:
        return FAILED, "building the tiny Llama model failed", made.stdout + made.stderr
    harness.prepare(task, data_dir=source, log=lambda _message: None)
    workspace = harness.new_workspace(task, root / "workspace")  # the starter's inference.py, as a run gets it

    outputs: list[str] = []

    class Recording(ScoringContext):
        """The scorer's own context, keeping what each timed command printed (its time and clock)."""

        def run(self, argv: list[str], workspace: Path, scratch: Path, *, env: Any = None,
                timeout_s: float | None = None) -> Any:
            if budget.left() <= 0:
                raise InvalidSubmission(f"out of time (--budget) after {len(outputs)} timed runs")
            result = super().run(argv, workspace, scratch, env=env, timeout_s=timeout_s)
            outputs.append(result.output)
            return result

    base = harness.scorer.context(task)
    context = Recording(new_sandbox=base.new_sandbox, limits=base.limits, hidden_paths=base.hidden_paths)
    with scoring_with(context):
        try:
            ratio = task.evaluate(workspace, harness.home.hidden_dir(task))
        except Exception as exc:
            return FAILED, f"timing failed: {exc}"[:300], "\n".join(outputs)
    reports = []  # each timed command prints one pair (time_pair.py): the starter's and the submission's report
    for output in outputs:
        found = [line for line in output.splitlines() if line.startswith("{")]
        if found:
            pair = json.loads(found[-1])
            reports += [pair[who] for who in ("starter", "submission") if isinstance(pair.get(who), dict)]
    clocks = sorted({str(r.get("clock")) for r in reports})
    seconds = statistics.median(float(r["seconds"]) for r in reports) if reports else float("nan")
    where = harness.sandbox_name + (f" ({note})" if note else "")
    shown = (f"in {where}: starter/starter ratio {ratio:.3f} over {len(reports)} timed runs, generation "
             f"{seconds:.3f} s a run (median), clock {'/'.join(clocks)}")
    wanted = "wall" if device == "cuda" else "cpu"  # time_generation.py times by the wall clock on a GPU
    if clocks != [wanted]:
        return FAILED, f"the timed runs did not see the {device}: {shown}", "\n".join(outputs)
    return PASSED, shown, "\n".join(outputs)


def slices_module() -> Any:
    """gpu_slices.py beside this script (imported by the bench's workers too, by its name)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import gpu_slices

    return gpu_slices


# ---- main ------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        reason, has = gpu_probe()
        if reason:
            print(f"gpu-check: no GPU here ({reason}); nothing was checked")
            return NO_GPU
        print(f"gpu-check: {has}", flush=True)
    installed = {ep.name for ep in entry_points(group="mlab")} | {"local"}
    os.environ.setdefault("MLAB_LOAD_PLUGINS", ",".join(p for p in PLUGINS if p in installed))
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # what the scoring sandbox passes on to the timed runs
        os.environ["MLAB_ALLOW_NO_GPU"] = "1"  # llama-inference otherwise refuses a machine without a GPU
    budget = Budget(args.budget)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="mlab-gpu-check-") as folder:
        scratch = Path(folder)
        os.environ["MLAB_HOME"] = str(scratch / "home")  # prepared tasks go here, never to ~/.cache/mlab
        from mlab.core.plugins.registry import load_registry
        from mlab.core.run.taskdata import TaskHome

        registry = load_registry()
        home = TaskHome(scratch / "home")
        extra = show_python_to_sandboxes(scratch)
        if extra:
            print(f"gpu-check: shown read-only to agent code as well (MLAB_SANDBOX_RO): {':'.join(extra)}")
        if "cuda-step" in args.only:
            for name in args.sandboxes:
                results.append(timed(f"cuda step [{name}]", budget, functools.partial(
                    cuda_step, registry, name, args.device, scratch / f"step-{name}", budget)))
        if "cifar10" in args.only:
            results.append(timed("cifar10", budget, lambda: cifar10(
                registry, home, args.device, scratch / "cifar10", args.cifar_per_batch, budget)))
        if "llama" in args.only:
            results.append(timed("llama-inference", budget, lambda: llama(
                registry, home, args.device, scratch / "llama", args.llama_lines, budget)))
        if "gpu-slices" in args.only:
            results.append(timed("gpu-slices", budget, lambda: slices_module().check(
                args.device, scratch / "gpu-slices", budget.timeout(SLICES_TIMEOUT_S))))
    if args.log_dir is not None:
        write_logs(args.log_dir, results)
    logs = failure_logs(results)
    if logs:
        print(logs)
    print(format_table(results))
    print(summary(results))
    return exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
