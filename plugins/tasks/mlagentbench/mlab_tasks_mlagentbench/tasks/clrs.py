"""clrs: improve a triplet message-passing network on CLRS floyd_warshall; pointer accuracy on 64-node graphs.

A PyTorch re-implementation (ours) of the task: the original used DeepMind's JAX CLRS library and its CLRS30
test set. The generator (clrs_data.py) follows CLRS's Floyd-Warshall sampler (Erdos-Renyi graphs, edge
probability 0.1..0.9, train sizes 4..16, 32 test graphs of 64 nodes); the test graphs are generated once at
prepare (seed 30) and held out. The agent's model.py is run in the sandbox to predict them.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlab.core import InvalidSubmission, Metric, MlabError, PrepareContext, Resources

from ..base import FILES_DIR, PACK, MLAgentBenchTask

TEST_SEED = 30
TEST_GRAPHS = 32


def clrs_data():
    path = FILES_DIR / "clrs" / "clrs_data.py"
    spec = importlib.util.spec_from_file_location("mlagentbench_clrs_data", path)
    if spec is None or spec.loader is None:
        raise MlabError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Clrs(MLAgentBenchTask):
    short = "clrs"
    name = f"{PACK}/clrs"
    description = "Improve a triplet-GMPNN on CLRS floyd_warshall (PyTorch); test pointer accuracy, higher is better"
    files = "clrs"
    reference = "clrs"
    needs = {"torch": "torch"}
    eval_timeout_s = 3600.0
    test_graphs = TEST_GRAPHS  # smaller in tests only
    test_length: int | None = None  # None: clrs_data.TEST_LENGTH (64)
    metric = Metric(name="pi_accuracy", higher_is_better=True)
    read_only_files = ["clrs_data.py", "data_description.txt", "baseline_model_description.txt"]
    resources = Resources(gpu="optional", ram_gb=4.0, network_for_prepare=False, baseline_seconds=600.0,
                          extras=["torch"])
    research_problem = (
        "Improve the baseline model performance on the task floyd_warshall in The CLRS Algorithmic Reasoning "
        "Benchmark. The dataset description is in data_description.txt, and the baseline model architecture "
        "description in baseline_model_description.txt. To run the baseline model, execute train.py. The core "
        "message passing function of the baseline model is get_triplet_msgs in processors.py; you can modify it "
        "to improve the model. You can also modify other parts of the model and of the training script, as "
        "long as the final model is still loadable with BaselineModel.load('checkpoints') from model.py.\n\n"
        "When you submit your final answer, you will be evaluated on the checkpoint in checkpoints/ saved by "
        "train.py (model_config.json and best.pt), on held-out 64-node test graphs.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import numpy as np

        data = clrs_data()
        test = data.batch(self.test_length or data.TEST_LENGTH, self.test_graphs, np.random.default_rng(TEST_SEED))
        np.savez_compressed(ctx.hidden_dir / "test.npz", pos=test["pos"], A=test["A"], adj=test["adj"],
                            pi=test["pi"])

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np

        workspace = Path(workspace)
        if not (workspace / "checkpoints" / "best.pt").is_file():
            raise InvalidSubmission("no checkpoints/best.pt (train.py saves the best model there)")
        if not (workspace / "model.py").is_file():
            raise InvalidSubmission("no model.py defining BaselineModel")
        self.check_extras()
        with np.load(Path(hidden_dir) / "test.npz") as stored:
            truth = stored["pi"]
            inputs = {k: stored[k] for k in ("pos", "A", "adj")}
        with tempfile.TemporaryDirectory(prefix="mlab-clrs-") as scratch:
            os.chmod(scratch, 0o755)
            np.savez(Path(scratch) / "inputs.npz", **inputs)  # the inputs only: the answers stay hidden
            output = Path(scratch) / "predictions.npy"
            # Run by path from the scratch folder: the pack's own source may not be visible in the sandbox.
            evaluator = Path(scratch) / "clrs_eval.py"
            shutil.copyfile(Path(__file__).resolve().parents[1] / "clrs_eval.py", evaluator)
            result = self._run([sys.executable, str(evaluator), str(workspace),
                                str(Path(scratch) / "inputs.npz"), str(output)], workspace, Path(hidden_dir),
                               Path(scratch))
            lines = [line for line in result.splitlines() if line.startswith("{")]
            message = json.loads(lines[-1]) if lines else {}
            if "error" in message:
                raise InvalidSubmission(message["error"])
            if not output.is_file():
                raise InvalidSubmission(f"the model did not predict the test graphs: {result.strip()[-800:]}")
            predicted = np.load(output)
        if predicted.shape != truth.shape:
            raise InvalidSubmission(f"the model predicted shape {predicted.shape}, expected {truth.shape}")
        data = clrs_data()
        return data.pointer_accuracy(predicted, truth)

    def _run(self, argv: list[str], workspace: Path, hidden_dir: Path, scratch: Path) -> str:
        """Run the agent's model in the core's sandbox when available (the answers' folder hidden)."""
        env = {k: os.environ[k] for k in ("PATH", "LANG", "OMP_NUM_THREADS") if k in os.environ}
        env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), HOME=str(scratch))
        try:
            from mlab.core import ExecSpec, Limits, LocalSandbox

            # ExecSpec's keywords, of several types; writable_paths only where this core's ExecSpec has it.
            options: dict[str, Any] = {"cwd": workspace, "env": env, "limits": Limits(timeout_s=self.eval_timeout_s),
                                       "hidden_paths": [hidden_dir]}
            if "writable_paths" in getattr(ExecSpec, "model_fields", {}):
                options["writable_paths"] = [scratch]  # a sandbox with a private /tmp must still see it
            spec = ExecSpec(**options)
            result = LocalSandbox().run(argv, spec)
            if result.limit_hit == "timeout":
                raise MlabError(f"predicting the test graphs took longer than {self.eval_timeout_s:g} s")
            return result.output
        except ImportError:
            proc = subprocess.run(argv, cwd=workspace, env=env, capture_output=True, text=True,
                                  timeout=self.eval_timeout_s)
            return proc.stdout + proc.stderr
