"""Time one starter/submission pair of a speed task: run by the scorer in the scoring sandbox, once per pair.
Usage: python time_pair.py MODE STAGE SCRATCH ORDER SHARED (MODE: forward or generation; ORDER: starter,submission
or the reverse; SHARED: the task files in STAGE linked into each run's folder, comma-separated). It runs no
submission code itself.

Each script runs in a worker process (time_forward.py or time_generation.py), which loads it and says so over a
pipe; only then does this process draw the inputs, from a seed of its own (os.urandom, in a process the workers
cannot read: it is made non-dumpable), send them, and wait for the outputs. What is timed is the CPU time the
worker and every process it started, alive or ended, spent between the inputs going out and the outputs coming
back (`WorkerClock`): a script cannot precompute outputs for inputs it cannot know, nor hide work in a helper
process. An ended process's time is in its reaper's: a process of the tree, or this one (orphans come back here:
it is their subreaper); a worker cannot make the kernel reap its children (by ignoring SIGCHLD), which would
count their time nowhere; and where a cgroup can be made for the worker, it counts them too. Loading is bounded:
the submission's may take at most LOAD_FACTOR times the starter's plus LOAD_SLACK_S. The outputs are checked
against the starter's on the same inputs. Prints one JSON line
{"starter": {...}, "submission": {...}, "problem": null or why the submission's run does not count}."""
import ctypes
import errno
import hashlib
import json
import os
import resource
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
PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 4, 36, 38, 22
SECCOMP_MODE_FILTER = 2
SECCOMP_ARCH = {"x86_64": (0xC000003E, 13), "aarch64": (0xC00000B7, 134)}  # AUDIT_ARCH_*, rt_sigaction's number
CONTEXT_LENGTH = 128  # llama-inference's, fixed by its DO NOT EDIT setup
CPU_TICK_S = 1 / os.sysconf("SC_CLK_TCK")  # /proc's CPU times count whole ticks


class Untimeable(Exception):
    """The worker's processes kept ending while the timer read their CPU time."""


def _stat(pid):
    """(parent pid, CPU ticks of the process with its threads and its waited-for children, start time), or None
    once it has been reaped. OSError where it is not this user's to read (hidepid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode()
        fields = stat[stat.rindex(")") + 2:].split()
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return int(fields[1]), sum(int(v) for v in fields[11:15]), int(fields[19])


def _stats():
    """pid -> _stat(pid) for every process this user may read, and whether none was reaped while read."""
    table, complete = {}, True
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = _stat(int(entry))
            except OSError:  # another user's: not of the worker's tree
                continue
            if stat is None:
                complete = False
            else:
                table[int(entry)] = stat
    return table, complete


def _still(pid, start):
    try:
        stat = _stat(pid)
    except OSError:
        return False
    return stat is not None and stat[2] == start


def descendants(table):
    me, found, changed = os.getpid(), set(), True
    while changed:
        changed = False
        for pid, (parent, _cpu, _start) in table.items():
            if pid not in found and (parent == me or parent in found):
                found.add(pid)
                changed = True
    return found


def tree_cpu_seconds():
    """The CPU seconds of this process's descendants, alive or zombies, with the children each has reaped. Only
    a reading during which none of them was reaped counts (each still there, with its start time: not a reused
    pid): a reap moves a process's time into its reaper's, so a reading across one could miss it at the end of a
    pass or count it twice at the start, either way time taken off the pass."""
    for _attempt in range(100):
        table, complete = _stats()
        tree = descendants(table)
        if complete and all(_still(pid, table[pid][2]) for pid in tree):
            return sum(table[pid][1] for pid in tree) * CPU_TICK_S
    raise Untimeable("its processes kept ending while the timer read their CPU time")


def _reaped_seconds():
    """CPU seconds of this process's children it has reaped (the worker, and orphans: it is their subreaper)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _new_cgroup(name):
    """A cgroup of its own below this process's (v2, else v1's cpuacct), with its CPU time file and scale, where
    one can be made; None elsewhere (a confined sandbox shows no cgroup file system)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            own = [line.rstrip("\n").split(":", 2) for line in f]
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    for version, usage in ((2, ("cpu.stat", 1e-6)), (1, ("cpuacct.usage", 1e-9))):
        for fields in mounts:
            fstype, options = fields[fields.index("-") + 1], fields[fields.index("-") + 3].split(",")
            if fstype != ("cgroup2" if version == 2 else "cgroup") or (version == 1 and "cpuacct" not in options):
                continue
            paths = [path for _id, names, path in own
                     if (names == "" if version == 2 else "cpuacct" in names.split(","))]
            relative = os.path.relpath(paths[0], fields[3]) if paths else ".."
            if relative.startswith(".."):
                continue
            folder = os.path.normpath(os.path.join(fields[4], relative, name))
            try:
                os.mkdir(folder)
            except OSError:
                continue
            return folder, *usage
    return None


def _sigchld_filter():
    """A seccomp program for a worker: rt_sigaction may read how SIGCHLD is handled but not change it, and no
    system call of another ABI (i386, x32) runs. A parent that ignores SIGCHLD or sets SA_NOCLDWAIT has its ended
    children reaped by the kernel, which adds their CPU time to no process: /proc would lose it."""
    machine = os.uname().machine
    if machine not in SECCOMP_ARCH:
        raise OSError(f"no seccomp filter for {machine}: the CPU time of a worker's processes cannot be trusted")
    arch, rt_sigaction = SECCOMP_ARCH[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM
    program = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, deny),  # seccomp_data.arch
               (ld, 0, 0, 0), (jge, 8, 0, 0x40000000), (jeq, 0, 6, rt_sigaction),  # .nr (x32 sets bit 30)
               (ld, 0, 0, 16), (jeq, 0, 4, signal.SIGCHLD),  # .args[0]: the signal
               (ld, 0, 0, 24), (jeq, 0, 3, 0), (ld, 0, 0, 28), (jeq, 0, 1, 0),  # .args[1]: a new action (64 bits)
               (ret, 0, 0, allow), (ret, 0, 0, deny)]
    return b"".join(struct.pack("=HBBI", *op) for op in program)


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class WorkerClock:
    """The CPU seconds the worker and every process it started have spent since it started, ended ones too, by
    each count that can be had: the processes in this process's tree (zombies too) with what they reaped, plus
    what this process reaped; and a cgroup of the worker's own where one can be made. Each count can only miss
    time, so a timing takes the largest difference. The worker cannot change how SIGCHLD is handled (seccomp),
    which alone would take its children's time out of the first count."""

    def __init__(self, name):
        self.reaped = _reaped_seconds()
        self.cgroup = _new_cgroup(name)
        program = _sigchld_filter()
        self._filter = ctypes.create_string_buffer(program, len(program))
        self._fprog = SockFprog(len(program) // 8, ctypes.addressof(self._filter))

    def enter(self):
        """In the worker, before it runs anything: into the cgroup, and under the filter."""
        if self.cgroup:
            try:
                with open(os.path.join(self.cgroup[0], "cgroup.procs"), "w", encoding="utf-8") as f:
                    f.write(str(os.getpid()))
            except OSError:  # not movable there: the cgroup counts nothing, the tree still counts
                pass
        libc = ctypes.CDLL(None, use_errno=True)
        ulong = ctypes.c_ulong
        if (libc.prctl(PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0))
                or libc.prctl(PR_SET_SECCOMP, ulong(SECCOMP_MODE_FILTER), ctypes.byref(self._fprog), ulong(0),
                              ulong(0))):
            raise OSError(ctypes.get_errno(), "the worker's seccomp filter")

    def read(self):
        counts = [tree_cpu_seconds() + _reaped_seconds() - self.reaped]
        if self.cgroup:
            folder, name, scale = self.cgroup
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    text = f.read()
                counts.append(scale * int(text.split("usage_usec")[1].split()[0] if "usage_usec" in text else text))
            except (OSError, ValueError, IndexError):
                counts.append(0.0)
        return counts

    def close(self):
        if self.cgroup:
            try:
                os.rmdir(self.cgroup[0])
            except OSError:
                pass


def pass_seconds(started, ended, clock):
    """A pass's seconds: the largest difference of the counts. On the CPU clock a pass shorter than a tick can read
    0; it took at most a tick, so that is its time (more than it may have taken, never less)."""
    seconds = max(end - start for start, end in zip(started, ended, strict=True))
    return max(seconds, CPU_TICK_S) if clock == "cpu" else seconds


def kill_leftovers():
    """Kill and reap every process a worker left behind (it must not slow down the next run)."""
    for _round in range(50):
        left = descendants(_stats()[0])
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
    clock = WorkerClock(f"mlab-timer-{os.getpid()}-{who}")
    try:
        worker = subprocess.Popen([sys.executable, "-s", os.path.join(stage, WORKERS[mode]), run_dir,
                                   os.path.join(stage, "starter")], env=env, pass_fds=(to_worker_r, from_worker_w),
                                  preexec_fn=clock.enter)
    except BaseException:
        clock.close()
        raise
    os.close(to_worker_r)
    os.close(from_worker_w)
    report: dict[str, Any] = {"seconds": float("inf"), "digests": []}
    try:
        frame = receive(from_worker_r)
        if frame is None:
            return report, f"the {who}'s script ended before it was loaded (exit code {worker.wait()})"
        report["load_seconds"] = max(clock.read())
        ready = json.loads(frame)
        report["clock"] = "wall" if ready.get("gpu") else "cpu"
        report["sequences"] = ready.get("sequences")
        read = (lambda: [time.perf_counter()]) if report["clock"] == "wall" else clock.read
        for _pass in range(PASSES[mode]):
            inputs = inputs_for(ready, run_dir)
            started = read()
            send(to_worker_w, inputs)
            output = receive(from_worker_r)
            seconds = pass_seconds(started, read(), report["clock"])
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
    except Untimeable as exc:
        return report, f"the {who}'s CPU time could not be read: {exc}"
    finally:
        if to_worker_w >= 0:
            os.close(to_worker_w)
        os.close(from_worker_r)
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        kill_leftovers()
        clock.close()


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
    # Inherited as ignored, SIGCHLD would have the kernel reap orphans ending here, and their time with them
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
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
