"""Predict the CLRS test graphs with a workspace's model; run as a subprocess (sandboxed) by the clrs task.

python -m mlab_tasks_mlagentbench.clrs_eval WORKSPACE INPUTS.npz OUTPUT.npy
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    workspace, inputs, output = (Path(a) for a in (argv or sys.argv[1:]))
    sys.path.insert(0, str(workspace))
    import numpy as np
    import torch

    try:
        # The workspace's own model.py, found on sys.path only at run time.
        model = importlib.import_module("model").BaselineModel.load(workspace / "checkpoints")
    except Exception as exc:
        print(json.dumps({"error": f"checkpoints/ cannot be loaded with model.BaselineModel.load: "
                                   f"{type(exc).__name__}: {exc}"}))
        return 3
    data = np.load(inputs)
    predictions = []
    with torch.no_grad():
        for start in range(0, len(data["pos"]), 4):
            part = {k: torch.tensor(data[k][start:start + 4]) for k in ("pos", "A", "adj")}
            predictions.append(np.asarray(model.predict(part["pos"], part["A"], part["adj"]).cpu().numpy()))
    np.save(output, np.concatenate(predictions))
    print(json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
