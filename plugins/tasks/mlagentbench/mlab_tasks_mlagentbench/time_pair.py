"""Time one starter/submission pair of a speed task: run by the scorer in the scoring sandbox, once per pair.
Usage: python time_pair.py MODE STAGE SCRATCH ORDER SHARED (MODE: forward or generation; ORDER: starter,submission
or the reverse; SHARED: the task files in STAGE linked into each run's folder, comma-separated). It runs no
submission code itself.

Each script runs in a worker process (time_forward.py or time_generation.py), which loads it and says so over a
pipe; only then does this process draw the inputs, from a seed of its own (os.urandom, in a process the workers
cannot read: it is made non-dumpable), send them, and wait for the outputs. What is timed is the CPU time the
worker and every process it started (orphans come back here: this process is their subreaper) spent between the
inputs going out and the outputs coming back: a script cannot precompute outputs for inputs it cannot know, nor
hide work in a helper process. Loading is bounded: the submission's may take at most LOAD_FACTOR times the
starter's plus LOAD_SLACK_S. The outputs are checked against the starter's on the same inputs. Prints one JSON line
{"starter": {...}, "submission": {...}, "problem": null or why the submission's run does not count}."""
import ctypes
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from typing import Any

WORKERS = {"forward": "time_forward.py", "generation": "time_generation.py"}
PASSES = {"forward": 3, "generation": 1}  # forward: the fastest of 3 passes, each on new inputs
LOAD_FACTOR, LOAD_SLACK_S = 2.0, 5.0
SAME_SUM_RTOL = 1e-6  # a reordered float computation changes the last digits
SAME_TOKENS = 0.9  # of the starter's generated tokens the submission must match (fp16 on a GPU flips a few)
FDS_ENV = "MLAB_TIMER_FDS"
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
CONTEXT_LENGTH = 128  # llama-inference's, fixed by its DO NOT EDIT setup


def _stats():
    """pid -> (parent pid, CPU ticks of the process with its threads and its waited-for children)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read().decode()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            table[int(entry)] = (int(fields[1]), sum(int(v) for v in fields[11:15]))
    return table


def descendants(table):
    me, found, changed = os.getpid(), set(), True
    while changed:
        changed = False
        for pid, (parent, _cpu) in table.items():
            if pid not in found and (parent == me or parent in found):
                found.add(pid)
                changed = True
    return found


def tree_cpu_seconds():
    table = _stats()
    return sum(table[pid][1] for pid in descendants(table)) / os.sysconf("SC_CLK_TCK")


def kill_leftovers():
    """Kill and reap every process a worker left behind (it must not slow down the next run)."""
    for _round in range(50):
        left = descendants(_stats())
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.02)


def forward_inputs(rng):
    return struct.pack("<Q", int(rng.integers(0, 2**32 - 1)))


def forward_digest(output, seed_frame):
    """The output's shape, sum and a sum weighted by numbers drawn from the pass's seed (which no worker sees
    before it computes)."""
    import numpy as np

    ndim = struct.unpack("<Q", output[:8])[0]
    shape = list(struct.unpack(f"<{ndim}Q", output[8:8 + 8 * ndim]))
    values = np.frombuffer(output[8 + 8 * ndim:], dtype=np.float64)
    if values.size != int(np.prod(shape)):
        return {"shape": shape, "sum": float("nan"), "weighted": float("nan")}
    weights = np.random.default_rng(struct.unpack("<Q", seed_frame)[0] ^ 0x5EED).standard_normal(values.size)
    return {"shape": shape, "sum": float(values.sum()), "weighted": float(values @ weights)}


def generation_inputs(rng, ready, run_dir):
    """Random token ids, as many sequences as the script's setup made, context_length each."""
    import numpy as np

    with open(os.path.join(run_dir, "inference_config.json"), encoding="utf-8") as f:
        model_dir = os.path.join(run_dir, json.load(f)["model_dir"])
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    # no special token: generate() would take a pad token in the context for padding, a forward pass would not
    special = [config.get(k) for k in ("pad_token_id", "bos_token_id", "eos_token_id")]
    allowed = np.setdiff1d(np.arange(int(config["vocab_size"])), [t for t in special if isinstance(t, int)])
    count = int(ready["sequences"])
    return allowed[rng.integers(0, allowed.size, size=(count, CONTEXT_LENGTH))].astype(np.int64).tobytes()


def run_worker(mode, stage, scratch, who, inputs_for, shared):
    """Load `who`'s script in a worker, feed it inputs and time it: its report and its outputs' digests."""
    from time_frames import receive, send  # staged beside this script (the tests import this module)

    run_dir, home = os.path.join(scratch, "run"), os.path.join(scratch, "home")
    for folder in (run_dir, home):
        shutil.rmtree(folder, ignore_errors=True)
    # One folder name for every run: scripts run from folders of different names differ in speed
    shutil.copytree(os.path.join(stage, who), run_dir, symlinks=True)
    os.mkdir(home)
    for name in shared:
        os.symlink(os.path.join(stage, name), os.path.join(run_dir, name))
    to_worker_r, to_worker_w = os.pipe()
    from_worker_r, from_worker_w = os.pipe()
    env = {**os.environ, "HOME": home, "TMPDIR": home, FDS_ENV: f"{to_worker_r},{from_worker_w}"}
    worker = subprocess.Popen([sys.executable, "-s", os.path.join(stage, WORKERS[mode]), run_dir,
                               os.path.join(stage, "starter")], env=env, pass_fds=(to_worker_r, from_worker_w))
    os.close(to_worker_r)
    os.close(from_worker_w)
    report: dict[str, Any] = {"seconds": float("inf"), "digests": []}
    try:
        frame = receive(from_worker_r)
        if frame is None:
            return report, f"the {who}'s script ended before it was loaded (exit code {worker.wait()})"
        report["load_seconds"] = tree_cpu_seconds()
        ready = json.loads(frame)
        report["clock"] = "wall" if ready.get("gpu") else "cpu"
        report["sequences"] = ready.get("sequences")
        for _pass in range(PASSES[mode]):
            inputs = inputs_for(ready, run_dir)
            clock = time.perf_counter if report["clock"] == "wall" else tree_cpu_seconds
            started = clock()
            send(to_worker_w, inputs)
            output = receive(from_worker_r)
            seconds = clock() - started
            if output is None:
                return report, f"the {who}'s script ended without giving its outputs (exit code {worker.wait()})"
            report["seconds"] = min(report["seconds"], seconds)
            report["digests"].append(forward_digest(output, inputs) if mode == "forward"
                                     else {"tokens": json.loads(output)})
        os.close(to_worker_w)
        to_worker_w = -1
        code = worker.wait()
        if code != 0:
            return report, f"the {who}'s script failed after its timed part (exit code {code})"
        return report, None
    finally:
        if to_worker_w >= 0:
            os.close(to_worker_w)
        os.close(from_worker_r)
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        kill_leftovers()


def difference(mode, starter, submission):
    """Why the submission's outputs are not the starter's, or None."""
    if submission["clock"] != starter["clock"]:
        return f"the submission ran on another device than the starter ({submission['clock']} clock)"
    if submission["load_seconds"] > LOAD_FACTOR * starter["load_seconds"] + LOAD_SLACK_S:
        return (f"the submission spent {submission['load_seconds']:.1f} s of CPU before its timed part, the "
                f"starter {starter['load_seconds']:.1f} s: at most {LOAD_FACTOR:g}x plus {LOAD_SLACK_S:g} s")
    for ours, theirs in zip(starter["digests"], submission["digests"], strict=False):
        if mode == "forward":
            if ours["shape"] != theirs["shape"] or not all(
                    abs(theirs[k] - ours[k]) <= SAME_SUM_RTOL * max(1.0, abs(ours[k])) for k in ("sum", "weighted")):
                return (f"the forward pass computes another result than the starter's on the same inputs (shape "
                        f"{theirs['shape']} vs {ours['shape']}, sum {theirs['sum']:.9g} vs {ours['sum']:.9g})")
        else:
            expected, got = ours["tokens"], theirs["tokens"]
            same = sum(a == b for a, b in zip(expected, got, strict=False))
            if len(got) != len(expected) or same < SAME_TOKENS * len(expected):
                return (f"the script generated other tokens than the starter's on the same inputs: {len(got)} "
                        f"tokens, {same} of the starter's {len(expected)} matched")
    return None


def main():
    mode, stage, scratch, order, shared = sys.argv[1:6]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the workers cannot read this process's memory (the seed)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # a worker's orphans stay countable and killable
    import numpy as np

    seed = int.from_bytes(os.urandom(16), "little")
    reports, problem = {}, None
    for who in order.split(","):
        rng = np.random.default_rng(seed)  # the same inputs for both scripts of the pair
        if mode == "forward":
            def inputs_for(_ready, _run_dir, rng=rng):
                return forward_inputs(rng)
        else:
            def inputs_for(ready, run_dir, rng=rng):
                return generation_inputs(rng, ready, run_dir)
        reports[who], failure = run_worker(mode, stage, scratch, who, inputs_for, [n for n in shared.split(',') if n])
        if failure:
            print(failure, file=sys.stderr)
            sys.exit(1)
    problem = difference(mode, reports["starter"], reports["submission"])
    for report in reports.values():  # digests stay here; their hash tells runs apart in the scorer's logs
        report["outputs"] = hashlib.sha256(json.dumps(report.pop("digests")).encode()).hexdigest()[:16]
    print(json.dumps({**reports, "problem": problem}), flush=True)


if __name__ == "__main__":
    main()
