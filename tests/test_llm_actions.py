"""The model-backed actions with the scripted backend: prompts reach the right role, results land in the workspace."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mlab.core.errors import LLMError
from mlab.core.llm.backend import LLM
from mlab.core.llm.client import LLMClient
from mlab.core.models import Action
from mlab.core.run.environment import Environment, EnvSettings
from mlab.core.run.llm_actions import BLOCK_CHARS, extract_code, split_blocks
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox
from mlab_llm_scripted.backend import ScriptedLLM

SECRET = "SECRET-ANSWER-42"
TRAIN = "id,label\n1,0\n2,1\n"
SCRIPT = "import pandas as pd\nlr = 0.1\nepochs = 5\nprint('train', lr, epochs)\n"


class Harness:
    def __init__(self, tmp_path: Path, fast=(), edit=(), main=(), llm=None):
        ws = tmp_path / "ws"
        (ws / "data").mkdir(parents=True)
        (ws / "data" / "train.csv").write_text(TRAIN)
        (ws / "train.py").write_text(SCRIPT)
        taskdata = tmp_path / "taskdata"
        (taskdata / "hidden").mkdir(parents=True)
        (taskdata / "hidden" / "answers.csv").write_text(SECRET + "\n")
        shutil.copytree(ws, taskdata / "public")
        self.log = tmp_path / "llm_calls.jsonl"
        self.backends = {"main": ScriptedLLM(completions=list(main)), "fast": ScriptedLLM(completions=list(fast)),
                         "edit": ScriptedLLM(completions=list(edit))}
        self.llm = llm or LLMClient(self.backends, log_path=self.log)
        self.env = Environment(EnvSettings(
            workspace=ws, read_only_patterns=["data/*"], sandbox=LocalSandbox(),
            store=SnapshotStore(tmp_path / "store"), pristine_dir=taskdata / "public", hidden_paths=[taskdata],
            sandbox_home=tmp_path / "home", limits=Limits(timeout_s=10), llm=self.llm))
        self.ws = ws
        self.tmp = tmp_path

    def act(self, name, **args):
        return self.env.execute(Action(name=name, args=args))

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def prompts(self, role=None) -> list[str]:
        return ["\n".join(m["content"] for m in c["messages"]) for c in self.calls() if role in (None, c["role"])]


def fenced(code: str) -> str:
    return f"Here is the edited script:\n```python\n{code}```\nI changed what you asked."


# ---- Understand File ----------------------------------------------------------------------------

def test_understand_file_sends_the_file_to_the_fast_model(tmp_path):
    h = Harness(tmp_path, fast=["The learning rate is 0.1 (line 2)."])
    obs, err = h.act("Understand File", file_name="train.py", things_to_look_for="the learning rate")
    assert (obs, err) == ("The learning rate is 0.1 (line 2).", False)
    [call] = h.calls()
    assert call["role"] == "fast"
    prompt = h.prompts()[0]
    assert "lr = 0.1" in prompt and "the learning rate" in prompt and "train.py" in prompt


def test_understand_long_file_reads_in_blocks_then_merges(tmp_path):
    h = Harness(tmp_path, fast=["part one", "part two", "part three", "merged account"])
    (h.ws / "big.log").write_text("".join(f"line {i} " + "x" * 90 + "\n" for i in range(2 * BLOCK_CHARS // 100 + 50)))
    obs, err = h.act("Understand File", file_name="big.log", things_to_look_for="errors")
    assert (obs, err) == ("merged account", False)
    prompts = h.prompts("fast")
    assert len(prompts) == 4
    assert "lines 1 to" in prompts[0] and "line 0 " in prompts[0]
    assert "part one" in prompts[-1] and "part three" in prompts[-1] and "Merge" in prompts[-1]


def test_understand_file_refusals_do_not_call_the_model(tmp_path):
    h = Harness(tmp_path, fast=["never"])
    os.symlink(tmp_path / "taskdata" / "hidden" / "answers.csv", h.ws / "answers.csv")
    (h.ws / "w.bin").write_bytes(b"\x00\x01")
    for file_name, expected in [("answers.csv", "outside the workspace"), ("../taskdata/hidden/answers.csv",
                                "outside the workspace"), ("nope.txt", "does not exist"), ("data", "is a folder"),
                                ("w.bin", "binary")]:
        obs, err = h.act("Understand File", file_name=file_name, things_to_look_for="answers")
        assert err and expected in obs and SECRET not in obs, obs
    with open(h.ws / "huge.txt", "wb") as f:
        f.truncate(3_000_000)
    obs, err = h.act("Understand File", file_name="huge.txt", things_to_look_for="x")
    assert err and "Understand File reads files up to that size" in obs
    assert h.calls() == []


# ---- Edit Script (AI) ---------------------------------------------------------------------------

def test_edit_script_saves_the_models_code_and_shows_a_diff(tmp_path):
    new = SCRIPT.replace("lr = 0.1", "lr = 0.01")
    h = Harness(tmp_path, edit=[fenced(new)])
    obs, err = h.act("Edit Script (AI)", script_name="train.py", edit_instruction="lower the learning rate",
                     save_name="train_v2.py")
    assert not err
    assert obs.startswith("The edited file is saved as train_v2.py.")
    assert "-lr = 0.1\n+lr = 0.01\n" in obs
    assert (h.ws / "train_v2.py").read_text() == new
    assert (h.ws / "train.py").read_text() == SCRIPT
    [call] = h.calls()
    assert call["role"] == "edit"
    assert "lr = 0.1" in h.prompts()[0] and "lower the learning rate" in h.prompts()[0]


def test_edit_script_creates_a_missing_script_and_can_be_undone(tmp_path):
    h = Harness(tmp_path, edit=[fenced("print('v1')\n"), fenced("print('v2')\n")])
    assert not h.act("Edit Script (AI)", script_name="new.py", edit_instruction="write a hello script",
                     save_name="new.py")[1]
    assert (h.ws / "new.py").read_text() == "print('v1')\n"
    assert not h.act("Edit Script (AI)", script_name="new.py", edit_instruction="v2", save_name="new.py")[1]
    assert "print('v1')" in h.prompts("edit")[1]
    obs, err = h.act("Undo Edit Script", script_name="new.py")
    assert not err and (h.ws / "new.py").read_text() == "print('v1')\n"


def test_edit_script_empty_reply_saves_nothing(tmp_path):
    h = Harness(tmp_path, edit=["```python\n```"])
    obs, err = h.act("Edit Script (AI)", script_name="train.py", edit_instruction="x", save_name="train.py")
    assert err and "the model returned no code" in obs
    assert (h.ws / "train.py").read_text() == SCRIPT


def test_edit_script_unclosed_fence(tmp_path):
    h = Harness(tmp_path, edit=["```python\nprint('cut off')\nx = 1"])
    assert not h.act("Edit Script (AI)", script_name="train.py", edit_instruction="x", save_name="t.py")[1]
    assert (h.ws / "t.py").read_text() == "print('cut off')\nx = 1\n"


# ---- Edit Script Segment (AI) -------------------------------------------------------------------

def test_edit_segment_replaces_only_those_lines(tmp_path):
    h = Harness(tmp_path, edit=[fenced("lr = 0.05\nepochs = 20\n")])
    obs, err = h.act("Edit Script Segment (AI)", script_name="train.py", start_line_number=2, end_line_number="3",
                     edit_instruction="train longer", save_name="train.py")
    assert not err and "+epochs = 20" in obs
    assert (h.ws / "train.py").read_text() == SCRIPT.replace("lr = 0.1\nepochs = 5", "lr = 0.05\nepochs = 20")
    prompt = h.prompts("edit")[0]
    assert "lr = 0.1\nepochs = 5\n" in prompt and "import pandas" not in prompt and "train longer" in prompt
    h.act("Undo Edit Script", script_name="train.py")
    assert (h.ws / "train.py").read_text() == SCRIPT


@pytest.mark.parametrize("start,end", [(0, 2), (3, 2), (10, 12)])
def test_edit_segment_bad_ranges(tmp_path, start, end):
    h = Harness(tmp_path, edit=["never"])
    obs, err = h.act("Edit Script Segment (AI)", script_name="train.py", start_line_number=start,
                     end_line_number=end, edit_instruction="x", save_name="train.py")
    assert err and "are not in 'train.py', which has 4 lines" in obs
    assert h.calls() == []


# ---- read-only and escapes through the model-backed writers -------------------------------------

@pytest.mark.parametrize("save_name", ["data/train.csv", "./data/../data/train.csv", "data/new.py"])
def test_model_edits_cannot_write_read_only_files(tmp_path, save_name):
    h = Harness(tmp_path, edit=[fenced("hacked\n")] * 2)
    obs, err = h.act("Edit Script (AI)", script_name="train.py", edit_instruction="x", save_name=save_name)
    assert err and "read-only" in obs
    obs, err = h.act("Edit Script Segment (AI)", script_name="data/train.csv", start_line_number=1,
                     end_line_number=1, edit_instruction="x", save_name=save_name)
    assert err and "read-only" in obs
    assert (h.ws / "data" / "train.csv").read_text() == TRAIN
    assert not (h.ws / "data" / "new.py").exists()
    assert h.calls() == []  # refused before spending a model call


def test_model_edits_cannot_escape(tmp_path):
    h = Harness(tmp_path, edit=[fenced("pwned\n")] * 4)
    (tmp_path / "outside.py").write_text("outside\n")
    os.symlink(tmp_path / "outside.py", h.ws / "link.py")
    for script, save in [("train.py", "../outside.py"), ("train.py", "link.py"), ("link.py", "x.py"),
                         ("train.py", str(tmp_path / "outside.py"))]:
        for name, extra in [("Edit Script (AI)", {}),
                            ("Edit Script Segment (AI)", {"start_line_number": 1, "end_line_number": 1})]:
            obs, err = h.act(name, script_name=script, edit_instruction="x", save_name=save, **extra)
            assert err and ("outside the workspace" in obs or "absolute paths" in obs), obs
    assert (tmp_path / "outside.py").read_text() == "outside\n"
    assert not (h.ws / "x.py").exists()
    assert h.calls() == []


# ---- Reflection and Retrieval -------------------------------------------------------------------

def test_reflection_and_retrieval_read_the_research_log(tmp_path):
    h = Harness(tmp_path, fast=["Try a smaller learning rate.", "lr 0.1 gave 0.81."])
    h.act("Append Summary to Research Log", content="Baseline: lr 0.1 gave accuracy 0.81")
    assert h.act("Reflection", things_to_reflect_on="what to try next?") == ("Try a smaller learning rate.", False)
    assert h.act("Retrieval from Research Log", current_plan="tune lr") == ("lr 0.1 gave 0.81.", False)
    reflect, retrieve = h.prompts("fast")
    assert "lr 0.1 gave accuracy 0.81" in reflect and "what to try next?" in reflect
    assert "lr 0.1 gave accuracy 0.81" in retrieve and "tune lr" in retrieve


def test_reflection_with_no_log(tmp_path):
    h = Harness(tmp_path, fast=["Nothing yet."])
    assert h.act("Reflection", things_to_reflect_on="status") == ("Nothing yet.", False)
    assert "(empty)" in h.prompts()[0]


# ---- model failures -----------------------------------------------------------------------------

class TooLong(LLM):
    name = "toolong"

    def complete(self, messages, **params):
        raise LLMError("prompt has 900000 tokens", context_too_long=True)


class Boom(LLM):
    name = "boom"

    def complete(self, messages, **params):
        raise LLMError("service down for good")


def test_context_too_long_is_an_observation(tmp_path):
    backend = TooLong()
    h = Harness(tmp_path, llm=LLMClient({"main": backend, "fast": backend, "edit": backend}))
    obs, err = h.act("Understand File", file_name="train.py", things_to_look_for="x")
    assert err and obs.startswith("EnvError: the text is too long for the model: prompt has 900000 tokens")
    obs, err = h.act("Edit Script (AI)", script_name="train.py", edit_instruction="x", save_name="train.py")
    assert err and (h.ws / "train.py").read_text() == SCRIPT


def test_other_model_failures_reach_the_runner(tmp_path):
    backend = Boom()
    h = Harness(tmp_path, llm=LLMClient({"main": backend, "fast": backend, "edit": backend}))
    with pytest.raises(LLMError, match="service down"):
        h.act("Reflection", things_to_reflect_on="x")
    # The scripted backend running out is such a failure too.
    h = Harness(tmp_path / "b", fast=[])
    with pytest.raises(LLMError, match="ran out"):
        h.act("Reflection", things_to_reflect_on="x")


# ---- helpers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("reply,code", [
    ("```python\nx = 1\n```", "x = 1\n"),
    ("Sure!\n```py\na = 1\n```\nand\n```python\nlonger = 2\nb = 3\n```\n", "longer = 2\nb = 3\n"),
    ("```python\ns = '''```'''\nt = 1\n```", "s = '''```'''\nt = 1\n"),
    ("```python \nx = 1\n```", "x = 1\n"),
    ("x = 1", "x = 1\n"),
    ("```python\nx = 1", "x = 1\n"),
    ("```\n```", ""),
])
def test_extract_code(reply, code):
    assert extract_code(reply) == code


def test_split_blocks_covers_every_line():
    text = "".join(f"{i}\n" for i in range(10_000))
    blocks = split_blocks(text, limit=5_000)
    assert blocks[0][0] == 1 and blocks[-1][1] == 10_000
    assert all(b[1] + 1 == n[0] for b, n in zip(blocks, blocks[1:], strict=False))
    assert "".join(b[2] for b in blocks) == text
    assert split_blocks("") == [(1, 0, "")]
