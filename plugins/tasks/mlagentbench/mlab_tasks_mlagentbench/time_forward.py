"""Time one Conv2D forward pass of a vectorization train.py: run by the scorer in the scoring sandbox, once per
script per repetition. Usage: python time_forward.py FOLDER (the folder holding train.py).

The batch and the layer's weights come from a fixed seed, so the starter and the submission compute on the same
numbers; the output's shape and sum tell the scorer the result is unchanged. The time is the process's CPU time
(numpy's threads are limited to one by the scorer), the fastest of REPEATS passes: other processes on the
machine only add to it (context switches cost cache), where they stretch wall-clock time by whatever share of
the cores they take. Prints one JSON line."""
import json
import os
import sys
import time

folder = os.path.abspath(sys.argv[1])
os.chdir(folder)
sys.path.insert(0, folder)
sys.argv = ["train.py"]
import importlib.util  # noqa: E402

import numpy as np  # noqa: E402

spec = importlib.util.spec_from_file_location("submitted_train", os.path.join(folder, "train.py"))
if spec is None or spec.loader is None:
    sys.exit("train.py cannot be loaded")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)  # the script's own timing runs only under __main__
np.random.seed(0)
batch = np.random.randn(32, 64, 64, 3)
layer = module.Conv2DLayer(3, 8, 3, 2, 2, "relu")
REPEATS = 3  # each on another batch: a forward pass that caches its results gains nothing
seconds, shapes, total = float("inf"), [], 0.0
for repeat in range(REPEATS):
    if repeat:
        batch = np.random.default_rng(repeat).standard_normal(batch.shape)
    start = time.process_time()
    output = np.asarray(layer.forward(batch))
    seconds = min(seconds, time.process_time() - start)
    shapes.append(list(output.shape))
    total += float(output.sum())
print(json.dumps({"seconds": seconds, "shape": shapes, "sum": total}))
