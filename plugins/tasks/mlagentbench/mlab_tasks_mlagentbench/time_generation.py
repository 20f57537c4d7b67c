"""Time the generation part of a llama-inference inference.py: run by the scorer in the scoring sandbox, once per
script per repetition. Usage: python time_generation.py FOLDER STARTER_FOLDER (FOLDER holds the inference.py to
time, with links to the task's model, data and inference_config.json; STARTER_FOLDER the shipped inference.py).

The script's DO NOT EDIT blocks must be the starter's, unchanged. What is timed lies between the end of the first
block (the fixed setup: loading the model and the data, the same for every script and slow for a 7B model) and
the start of the last one (the fixed footer recording the time): the script's generation loop and any preparation
of its own. The marks go onto the blocks' own comment lines, so tracebacks keep the script's line numbers.
Clock: CPU time of the process and its finished children on a CPU (the scorer limits torch to one thread), which
other processes on the machine barely change; wall-clock time, synchronised, when the script can use a GPU (GPU
work is no CPU time). The script's own printed and recorded times count for nothing. Prints one JSON line."""
import json
import os
import resource
import sys
import time

BLOCK_START, BLOCK_END = "#### DO NOT EDIT ######", "#################"
SCRIPT = "inference.py"
MARK = "__mlab_timing_mark__"


def fixed_blocks(source):
    """The DO NOT EDIT blocks of a script, each from its opening line to its closing line, in order."""
    lines, blocks, opened = source.splitlines(), [], None
    for number, line in enumerate(lines):
        if line.strip() == BLOCK_START and opened is None:
            opened = number
        elif line.strip() == BLOCK_END and opened is not None:
            blocks.append("\n".join(lines[opened:number + 1]))
            opened = None
    return blocks


def cpu_seconds():
    """CPU time of this process (to the nanosecond) and of its children that have ended (in ticks)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def instrumented(source, starter_source):
    """source with a timing mark at the end of its fixed setup and one at the start of its fixed footer;
    ValueError when its DO NOT EDIT blocks are not the starter's."""
    setup, footer = (fixed_blocks(starter_source) + [None, None])[:2]
    if setup is None or footer is None:
        raise ValueError("the starter's inference.py has no two DO NOT EDIT blocks")
    source = "\n" + source.replace("\r\n", "\n")
    setup_at = source.find("\n" + setup + "\n")
    footer_at = source.find("\n" + footer + "\n", setup_at + len(setup) + 1) if setup_at >= 0 else -1
    if setup_at < 0 or footer_at < 0:
        raise ValueError(f"{SCRIPT}'s DO NOT EDIT parts differ from the original's: they must stay exactly as they are")
    setup_last_line = setup_at + 1 + len(setup) - len(setup.splitlines()[-1])
    footer_start = footer_at + 1
    return (source[1:setup_last_line] + f"{MARK}('start')  " + source[setup_last_line:footer_start]
            + f"{MARK}('end')  " + source[footer_start:])


def time_script(folder, starter_folder):
    """The script's timed part in seconds, and the clock that measured it."""
    with open(os.path.join(starter_folder, SCRIPT), encoding="utf-8") as f:
        starter_source = f.read()
    with open(os.path.join(folder, SCRIPT), encoding="utf-8") as f:
        source = f.read()
    try:
        code = compile(instrumented(source, starter_source), os.path.join(folder, SCRIPT), "exec")
    except ValueError as exc:
        sys.exit(str(exc))
    readings = {}
    on_gpu = False

    def mark(name):
        nonlocal on_gpu
        if name in readings:
            raise RuntimeError(f"the timing mark {name!r} was passed twice")
        if name == "start":
            on_gpu = "torch" in sys.modules and sys.modules["torch"].cuda.is_available()
        if on_gpu:
            sys.modules["torch"].cuda.synchronize()
        readings[name] = time.perf_counter() if on_gpu else cpu_seconds()

    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [SCRIPT]
    exec(code, {"__name__": "__main__", "__file__": os.path.join(folder, SCRIPT), MARK: mark})
    if set(readings) != {"start", "end"}:
        sys.exit(f"{SCRIPT} ended without reaching its DO NOT EDIT footer")
    return readings["end"] - readings["start"], "wall" if on_gpu else "cpu"


if __name__ == "__main__":
    seconds, clock_name = time_script(*(os.path.abspath(path) for path in sys.argv[1:3]))
    print(json.dumps({"seconds": seconds, "clock": clock_name}))
