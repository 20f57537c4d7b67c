"""The gpu-slices check of `make gpu-check`: a two-run bench with --gpus-per-run 1, each run's agent script
reporting the GPU device nodes its sandbox shows, CUDA_VISIBLE_DEVICES, how many GPUs torch sees and a matrix
product on the first. It passes when each run saw exactly the GPU it was granted (RunConfig.compute.gpus), torch
saw one GPU and computed on it, and two runs that held the same GPU never held it at once (on a one-GPU machine
the second run waits for the first).

`registry` (for `mlab bench --registry gpu_slices:registry`, run from this folder) adds a task and an agent of its
own to the installed plugins: no data, no model, no network. --device cpu (a dry run without a GPU) points the
sandboxes at stand-in device nodes (MLAB_GPU_DEVICES) and checks the assignment alone.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TASK = "gpu-check/slices"
AGENT = "gpu-check-probe"
LINE = "GPU-SLICE "
NODES_OPTION = "nodes"  # the glob of GPU device nodes the probe lists (stand-ins in a dry run)
HOLD_S = 3.0  # the probe keeps its GPU a while, so that a run that wants the same one waits
PROBE = """\
import glob, json, os, re, time
t0 = time.time()
info = {{"seen": sorted(p for p in glob.glob({nodes!r}) if re.fullmatch(r"nvidia[0-9]+", os.path.basename(p))),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "count": 0, "on_cuda": False}}
try:
    import torch
    info["count"] = torch.cuda.device_count()
    if info["count"]:
        x = torch.ones(512, 512, device="cuda")
        info["sum"] = float((x @ x).sum().item())
        info["on_cuda"] = x.is_cuda
        info["name"] = torch.cuda.get_device_name(0)
except Exception as exc:
    info["error"] = repr(exc)[:300]
time.sleep({hold!r})
info["t0"], info["t1"] = t0, time.time()
open("probe.txt", "a").write("probed\\n")
print({line!r} + json.dumps(info))
"""


def registry() -> Any:
    """The installed plugins with this check's task and agent."""
    from pathlib import Path as _Path

    from mlab.core import Action, Agent, InvalidSubmission, Metric, RunState, Task
    from mlab.core.agentkit import AgentOptions
    from mlab.core.plugins.registry import load_registry

    class SlicesTask(Task):
        name = TASK
        description = "a GPU probe's task (make gpu-check)"
        research_problem = "Run gpu_probe.py."
        metric = Metric(name="probes", higher_is_better=True)

        def prepare(self, ctx: Any) -> None:
            (ctx.public_dir / "README.md").write_text("gpu-check\n")

        def evaluate(self, workspace: Any, hidden_dir: Any) -> float:
            probed = _Path(workspace) / "probe.txt"
            if not probed.exists():
                raise InvalidSubmission("the probe did not run")
            return float(len(probed.read_text().splitlines()))

    class ProbeOptions(AgentOptions):
        nodes: str = "/dev/nvidia*"

    class ProbeAgent(Agent):
        name = AGENT
        description = "reports the GPUs its code sees"
        needs_llm = False
        Options = ProbeOptions

        def step(self, state: RunState) -> Action:
            if state.step_index == 1:
                source = PROBE.format(nodes=str(self.ctx.options.get(NODES_OPTION, "/dev/nvidia*")), hold=HOLD_S,
                                      line=LINE)
                return Action(name="Write File", args={"file_name": "gpu_probe.py", "content": source})
            if state.step_index == 2:
                return Action(name="Execute Script", args={"script_name": "gpu_probe.py"})
            return Action(name="Final Answer", args={"final_answer": "done"})

    found = load_registry()
    for kind, name, item in (("tasks", TASK, SlicesTask()), ("agents", AGENT, ProbeAgent)):  # tasks as instances
        found.items[kind][name] = item
        found.providers[kind][name] = "gpu-check"
    return found


def runs_of(bench: Path) -> list[dict[str, Any]]:
    """Each run's grant and what its probe printed (None when it printed nothing)."""
    found = []
    for trace_path in sorted(bench.glob("runs/*/trace.json")):
        trace = json.loads(trace_path.read_text())
        probe = None
        for step in trace.get("steps", []):
            for text in step.get("observation", "").splitlines():
                if text.startswith(LINE):
                    probe = json.loads(text[len(LINE):])
        compute = trace["config"].get("compute") or {}
        found.append({"run": trace_path.parent.name, "status": trace.get("status"), "gpus": compute.get("gpus"),
                      "probe": probe, "end_reason": trace.get("end_reason")})
    return found


def verdict(runs: list[dict[str, Any]], device: str, nodes: dict[int, str]) -> tuple[bool, str]:
    """Whether each run saw only its own GPU and no GPU was held by two runs at once; and what was seen.
    nodes: GPU number -> the device node the sandboxes show for it."""
    if len(runs) != 2:
        return False, f"{len(runs)} runs, not 2"
    held: dict[int, list[tuple[float, float]]] = {}
    shown = []
    for run in runs:
        probe, gpus = run["probe"], run["gpus"]
        if probe is None:
            return False, f"{run['run']}: no probe output ({run['status']}: {run['end_reason']})"
        if not gpus or len(gpus) != 1:
            return False, f"{run['run']}: granted {gpus}, not one GPU"
        (gpu,) = gpus
        if probe["seen"] != [nodes.get(gpu)]:
            return False, f"{run['run']}: granted GPU {gpu}, its sandbox showed {probe['seen']}"
        if not probe["cuda"] or "," in probe["cuda"]:
            return False, f"{run['run']}: CUDA_VISIBLE_DEVICES={probe['cuda']!r}"
        if device == "cuda" and (probe["count"] != 1 or not probe["on_cuda"]):
            return False, (f"{run['run']}: torch saw {probe['count']} GPUs (on cuda: {probe['on_cuda']}) "
                           f"{probe.get('error', '')}".strip())
        held.setdefault(gpu, []).append((probe["t0"], probe["t1"]))
        shown.append(f"GPU {gpu} ({probe.get('name') or os.path.basename(nodes[gpu])}, "
                     f"CUDA_VISIBLE_DEVICES={probe['cuda']})")
    for spans in held.values():
        spans.sort()
        if any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)):
            return False, f"two runs held one GPU at once: {spans}"
    if len(nodes) >= 2 and len(held) < 2:
        return False, f"both runs got GPU {next(iter(held))} of {len(nodes)}"
    return True, "; ".join(shown)


def stand_ins() -> Path:
    """Two stand-in GPUs and a control node (the null device's numbers where this is root, else plain files),
    outside /tmp: every sandbox gives a command a /tmp of its own."""
    folder = Path(tempfile.mkdtemp(prefix="mlab-gpu-check-nodes-", dir="/var/tmp" if os.path.isdir("/var/tmp")
                                   else None))
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        if os.geteuid() == 0:
            os.mknod(folder / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        else:
            (folder / name).touch()
    return folder


def check(device: str, root: Path, timeout_s: float) -> tuple[str, str, str]:
    """(status, detail, log) of the two-run bench."""
    here = Path(__file__).resolve().parent
    env = dict(os.environ)
    options: list[str] = []
    folder = None
    if device == "cpu":
        folder = stand_ins()
        env["MLAB_GPU_DEVICES"] = ":".join(str(folder / n) for n in ("nvidia0", "nvidia1", "nvidiactl"))
        options = ["--agent-option", f"{NODES_OPTION}={folder}/nvidia*"]
    try:
        from mlab.core.sandbox.rootfs import machine_gpus

        nodes = {0: str(folder / "nvidia0"), 1: str(folder / "nvidia1")} if folder else machine_gpus()
        if not nodes:
            return "failed", "no /dev/nvidiaN device node here", ""
        bench = root / "bench"
        command = [sys.executable, "-m", "mlab.cli.main", "bench", "--tasks", TASK, "--agents", AGENT, "--runs", "2",
                   "--workers", "2", "--gpus-per-run", "1", "--max-steps", "5", "--bench-dir", str(bench),
                   "--registry", "gpu_slices:registry", *options]
        done = subprocess.run(command, cwd=here, env=env, capture_output=True, text=True, timeout=timeout_s)
        log = f"$ {' '.join(command)}\n{done.stdout}{done.stderr}"
        if done.returncode != 0:
            return "failed", f"mlab bench exited {done.returncode}", log
        runs = runs_of(bench)
        ok, detail = verdict(runs, device, nodes)
        return ("passed" if ok else "failed"), detail, log + "\n" + json.dumps(runs, indent=1)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
