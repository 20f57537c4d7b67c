"""The worker that runs a llama-inference inference.py for time_pair.py, in the scoring sandbox. Usage: python
time_generation.py FOLDER STARTER_FOLDER (FOLDER holds the inference.py to run, with links to the task's model,
data and inference_config.json; STARTER_FOLDER the shipped inference.py), with MLAB_TIMER_FDS set.

The script's DO NOT EDIT blocks must be the starter's, unchanged. At the end of the first block (the fixed setup:
loading the model and the data) the worker says the script is loaded and waits for its inputs: random token ids
drawn by time_pair.py, which replace the setup's eval_dataset (as many sequences, context_length tokens each). At
the start of the last block (the fixed footer) it sends back the tokens the script generated (its
`generated_tokens`, one entry a batch). time_pair.py times everything in between: the script's generation loop
and any preparation of its own. The marks go onto the blocks' own comment lines, so tracebacks keep the script's
line numbers. The script's own printed and recorded times count for nothing."""
import json
import os
import struct
import sys
from typing import Any

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


def _channel():
    import time_frames  # staged beside this script (a local import: the tests import this module from the package)

    to_me, to_timer = (int(fd) for fd in os.environ.pop("MLAB_TIMER_FDS").split(","))

    def receive():
        frame = time_frames.receive(to_me)
        if frame is None:
            sys.exit("the timer closed the pipe")
        return frame

    return (lambda payload: time_frames.send(to_timer, payload)), receive


def _token_ids(value):
    """A flat list of ints from generated_tokens (lists or tensors, one entry a batch)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [token for item in value for token in _token_ids(item)]
    return [int(value)]


def run_script(folder, starter_folder):
    with open(os.path.join(starter_folder, SCRIPT), encoding="utf-8") as f:
        starter_source = f.read()
    with open(os.path.join(folder, SCRIPT), encoding="utf-8") as f:
        source = f.read()
    try:
        code = compile(instrumented(source, starter_source), os.path.join(folder, SCRIPT), "exec")
    except ValueError as exc:
        sys.exit(str(exc))
    send, receive = _channel()
    passed = []
    script_globals: dict[str, Any] = {"__name__": "__main__", "__file__": os.path.join(folder, SCRIPT)}

    def mark(name):
        if name in passed:
            raise RuntimeError(f"the timing mark {name!r} was passed twice")
        passed.append(name)
        torch = sys.modules.get("torch")
        if name == "start":
            dataset = script_globals["eval_dataset"]
            gpu = bool(torch is not None and torch.cuda.is_available())
            send(json.dumps({"sequences": len(dataset), "gpu": gpu}).encode())
            ids = receive()
            width = context_length = script_globals["context_length"]
            flat = struct.unpack(f"<{len(ids) // 8}q", ids)
            dataset[:] = [{"input_ids": list(flat[i:i + width]), "attention_mask": [1] * context_length}
                          for i in range(0, len(flat), width)]
        else:
            send(json.dumps(_token_ids(script_globals.get("generated_tokens", []))).encode())

    script_globals[MARK] = mark
    os.chdir(folder)
    sys.path.insert(0, folder)
    sys.argv = [SCRIPT]
    exec(code, script_globals)
    if passed != ["start", "end"]:
        sys.exit(f"{SCRIPT} ended without reaching its DO NOT EDIT footer")


if __name__ == "__main__":
    run_script(*(os.path.abspath(path) for path in sys.argv[1:3]))
