"""The worker that runs a vectorization train.py's forward pass for time_pair.py, in the scoring sandbox.
Usage: python time_forward.py FOLDER STARTER_FOLDER (FOLDER holds train.py), with MLAB_TIMER_FDS set.

Loads train.py (its own timing runs only under __main__), says so, then for each seed it is sent seeds numpy,
makes a batch and the layer as the starter's __main__ does, and sends back the forward pass's output. The seed
arrives only after the script is loaded; time_pair.py times everything from sending it to getting the output."""
import importlib.util
import json
import os
import struct
import sys

from time_frames import receive, send  # staged beside this script

folder = os.path.abspath(sys.argv[1])
to_me, to_timer = (int(fd) for fd in os.environ.pop("MLAB_TIMER_FDS").split(","))


os.chdir(folder)
sys.path.insert(0, folder)
sys.argv = ["train.py"]
import numpy as np  # noqa: E402

spec = importlib.util.spec_from_file_location("submitted_train", os.path.join(folder, "train.py"))
if spec is None or spec.loader is None:
    sys.exit("train.py cannot be loaded")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
send(to_timer, json.dumps({"loaded": True}).encode())
while (frame := receive(to_me)) is not None:
    np.random.seed(struct.unpack("<Q", frame)[0])
    batch = np.random.randn(32, 64, 64, 3)
    layer = module.Conv2DLayer(3, 8, 3, 2, 2, "relu")
    output = np.ascontiguousarray(np.asarray(layer.forward(batch), dtype=np.float64))
    send(to_timer, struct.pack(f"<Q{output.ndim}Q", output.ndim, *output.shape) + output.tobytes())
