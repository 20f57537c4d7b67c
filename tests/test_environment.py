"""The agent's actions on the workspace: valid and invalid input, path escapes, read-only files, undo, limits."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mlab.core.actions import ACTION_SPECS
from mlab.core.llm.client import LLMClient
from mlab.core.models import Action
from mlab.core.run.environment import MAX_ARG_CHARS, Environment, EnvSettings, is_final
from mlab.core.run.files import MAX_INSPECT_LINES, MAX_LIST_ENTRIES
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.workspace import MAX_WRITE_BYTES
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox
from mlab_llm_scripted.backend import ScriptedLLM

SECRET = "SECRET-ANSWER-42"
TRAIN = "id,label\n1,0\n2,1\n"
SCRIPT = "print('hello from train')\n"


def make_env(tmp_path: Path, llm=None, interactive=False, ask_human=None, timeout=10.0, **settings) -> Environment:
    """A workspace like a run's: read-only data/, a script, and the task data (answers) folder hidden."""
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "train.csv").write_text(TRAIN)
    (ws / "train.py").write_text(SCRIPT)
    taskdata = tmp_path / "taskdata"
    (taskdata / "hidden").mkdir(parents=True)
    (taskdata / "hidden" / "answers.csv").write_text(SECRET + "\n")
    shutil.copytree(ws, taskdata / "public")
    (tmp_path / "outside.txt").write_text("outside\n")
    (tmp_path / "outside_dir").mkdir()
    (tmp_path / "outside_dir" / "x.txt").write_text("outside x\n")
    return Environment(EnvSettings(
        workspace=ws, read_only_patterns=["data/*"], sandbox=LocalSandbox(),
        store=SnapshotStore(tmp_path / "store"), pristine_dir=taskdata / "public", hidden_paths=[taskdata],
        sandbox_home=tmp_path / "home", limits=Limits(timeout_s=timeout), llm=llm, interactive=interactive,
        ask_human=ask_human, **settings))


@pytest.fixture
def env(tmp_path):
    environment = make_env(tmp_path)
    yield environment
    environment.close()


def act(env: Environment, name, **args) -> tuple[str, bool]:
    return env.execute(Action(name=name, args=args))


def scripted_llm(**roles) -> LLMClient:
    backends = {role: ScriptedLLM(completions=roles.get(role, [])) for role in ("main", "fast", "edit")}
    return LLMClient(backends)


# ---- invalid input ------------------------------------------------------------------------------

def test_unknown_action_lists_valid_ones(env):
    obs, err = act(env, "Fly To The Moon", where="moon")
    assert err and obs.startswith("EnvError: unknown action 'Fly To The Moon'")
    assert "List Files" in obs and "Final Answer" in obs
    assert "Request Help" not in obs  # only offered in interactive runs


@pytest.mark.parametrize("bad_name", [None, 42, ["Read File"]])
def test_non_string_action_name(env, bad_name):
    obs, err = env.execute(Action.model_construct(name=bad_name, args={}))
    assert err and obs.startswith("EnvError: unknown action")


@pytest.mark.parametrize("bad_args", ["train.py", ["train.py"], None, 3])
def test_non_dict_input(env, bad_args):
    obs, err = env.execute(Action.model_construct(name="Read File", args=bad_args))
    assert err and obs.startswith("EnvError: the action input must be a JSON object")
    assert 'Usage: Read File with Action Input {\n    "file_name"' in obs


@pytest.mark.parametrize("name", sorted(ACTION_SPECS))
def test_missing_arguments(tmp_path, name):
    env = make_env(tmp_path, interactive=True)
    obs, err = act(env, name)
    assert err and obs.startswith(f"EnvError: wrong arguments for {name} (missing {list(ACTION_SPECS[name].args)})")
    assert f"Usage: {name} with Action Input" in obs


@pytest.mark.parametrize("name", sorted(ACTION_SPECS))
def test_unknown_arguments(tmp_path, name):
    env = make_env(tmp_path, interactive=True)
    args = dict.fromkeys(ACTION_SPECS[name].args, "1")
    args["bogus"] = "x"
    obs, err = act(env, name, **args)
    assert err and obs.startswith(f"EnvError: wrong arguments for {name} (unexpected ['bogus'])")
    assert "Usage:" in obs
    assert not (env.workspace / "1").exists()


@pytest.mark.parametrize("name", sorted(ACTION_SPECS))
@pytest.mark.parametrize("value", [123, None, ["train.py"], {"a": 1}, 1.5])
def test_wrong_types(tmp_path, name, value):
    env = make_env(tmp_path, interactive=True)
    spec = ACTION_SPECS[name]
    text_args = [a for a in spec.args if not a.endswith("_line_number")]
    args = {a: ("5" if a.endswith("_line_number") else "train.py") for a in spec.args}
    args[text_args[0]] = value
    obs, err = act(env, name, **args)
    assert err and obs.startswith(f"EnvError: {text_args[0]} must be a string, not {type(value).__name__}")
    assert "Usage:" in obs


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", "", "²", "9" * 5000, True, 2.5, None, [3], "1e3"])
def test_bad_line_numbers(env, value):
    obs, err = act(env, "Inspect Script Lines", script_name="train.py", start_line_number=value,
                   end_line_number="3")
    assert err and obs.startswith("EnvError: start_line_number must be a positive whole number")
    assert "Usage: Inspect Script Lines" in obs


@pytest.mark.parametrize("value", [1, "1", " 1 ", 1.0])
def test_line_numbers_as_int_string_or_whole_float(env, value):
    obs, err = act(env, "Inspect Script Lines", script_name="train.py", start_line_number=value,
                   end_line_number=1)
    assert not err and obs.endswith("1: print('hello from train')")


def test_oversized_content(env):
    obs, err = act(env, "Write File", file_name="big.txt", content="x" * (MAX_ARG_CHARS + 1))
    assert err and obs.startswith(f"EnvError: content is {MAX_ARG_CHARS + 1} characters long")
    # Few characters but too many bytes once encoded.
    obs, err = act(env, "Write File", file_name="big.txt", content="é" * (MAX_WRITE_BYTES // 2 + 1))
    assert err and "bytes is more than the" in obs
    assert not (env.workspace / "big.txt").exists()
    # Appending past the limit is refused as well, and leaves the file alone.
    act(env, "Write File", file_name="log.txt", content="a" * (MAX_WRITE_BYTES - 10))
    obs, err = act(env, "Append File", file_name="log.txt", content="b" * 20)
    assert err and "more than the" in obs
    assert (env.workspace / "log.txt").stat().st_size == MAX_WRITE_BYTES - 10


def test_lone_surrogates_refused(env):
    obs, err = act(env, "Write File", file_name="u.txt", content="bad \ud800 text")
    assert err and obs == "EnvError: content contains characters that are not valid Unicode (lone surrogates)"
    obs, err = act(env, "Read File", file_name="\udcff.txt")
    assert err and "not valid Unicode" in obs


def test_observations_are_valid_utf8(env):
    (env.workspace / os.fsdecode(b"bad-\xff-name.txt")).write_bytes(b"caf\xe9 \xff\xfe text\n")
    obs, err = act(env, "List Files", dir_path=".")
    assert not err and "bad-" in obs
    obs.encode("utf-8")  # would raise on a lone surrogate
    obs, err = act(env, "Read File", file_name=os.fsdecode(b"bad-\xff-name.txt"))
    assert err  # the agent's text cannot hold that name; it is refused, not crashed on
    (env.workspace / "latin1.txt").write_bytes(b"caf\xe9 \xff\xfe text\n")
    obs, err = act(env, "Read File", file_name="latin1.txt")
    assert not err and "caf\ufffd" in obs and obs.endswith("text\n")


# ---- every action with valid input --------------------------------------------------------------

def test_list_files(env):
    (env.workspace / "sub").mkdir()
    obs, err = act(env, "List Files", dir_path=".")
    assert not err and obs.split("\n") == ["data/", "sub/", "train.py"]
    assert act(env, "List Files", dir_path="sub") == ("(empty folder)", False)
    assert act(env, "List Files", dir_path="data/")[0] == "train.csv"


def test_list_files_caps_huge_folders(env):
    folder = env.workspace / "many"
    folder.mkdir()
    for i in range(MAX_LIST_ENTRIES + 5):
        (folder / f"f{i:05d}").touch()
    obs, err = act(env, "List Files", dir_path="many")
    assert not err and obs.endswith("[... and 5 more entries]")
    assert len(obs.splitlines()) == MAX_LIST_ENTRIES + 1


def test_read_file(env):
    assert act(env, "Read File", file_name="train.py") == (SCRIPT, False)
    assert act(env, "Read File", file_name="./data/train.csv") == (TRAIN, False)


def test_write_file_creates_folders(env):
    obs, err = act(env, "Write File", file_name="out/sub/notes.txt", content="hi\n")
    assert not err and obs == "File out/sub/notes.txt written (3 characters)."
    assert (env.workspace / "out/sub/notes.txt").read_text() == "hi\n"


def test_write_file_replaces_rather_than_writing_through_hard_links(env, tmp_path):
    os.link(tmp_path / "outside.txt", env.workspace / "linked.txt")
    obs, err = act(env, "Write File", file_name="linked.txt", content="new\n")
    assert not err
    assert (env.workspace / "linked.txt").read_text() == "new\n"
    assert (tmp_path / "outside.txt").read_text() == "outside\n"


def test_append_file(env):
    assert act(env, "Append File", file_name="train.py", content="print(2)\n") == \
        ("Appended 9 characters to train.py.", False)
    assert (env.workspace / "train.py").read_text() == SCRIPT + "print(2)\n"
    assert not act(env, "Append File", file_name="new.txt", content="first")[1]
    assert (env.workspace / "new.txt").read_text() == "first"


def test_copy_file(env):
    obs, err = act(env, "Copy File", source="data/train.csv", destination="copies/train_copy.csv")
    assert not err and obs == "File data/train.csv copied to copies/train_copy.csv."
    assert (env.workspace / "copies/train_copy.csv").read_text() == TRAIN
    obs, err = act(env, "Copy File", source="nope.csv", destination="x.csv")
    assert err and obs == "EnvError: file 'nope.csv' does not exist"
    obs, err = act(env, "Copy File", source="data", destination="x.csv")
    assert err and "is a folder" in obs
    obs, err = act(env, "Copy File", source="train.py", destination="data_copy")  # a new name is fine
    assert not err
    (env.workspace / "adir").mkdir()
    obs, err = act(env, "Copy File", source="train.py", destination="adir")
    assert err and obs == "EnvError: 'adir' is a folder"


def test_final_answer(env):
    action = Action(name="Final Answer", args={"final_answer": "done"})
    assert env.execute(action) == ("Final answer submitted; the run ends here.", False)
    assert is_final(action)


def test_append_summary_and_log(env):
    assert act(env, "Append Summary to Research Log", content="step 1: baseline 0.5\n\n\n") == \
        ("Added to research_log.log.", False)
    act(env, "Append Summary to Research Log", content="step 2: tuned")
    assert (env.workspace / "research_log.log").read_text() == "step 1: baseline 0.5\n\nstep 2: tuned\n\n"


def test_request_help(tmp_path):
    asked = []
    env = make_env(tmp_path, interactive=True, ask_human=lambda q: asked.append(q) or "try a smaller lr")
    assert act(env, "Request Help", request="stuck") == ("try a smaller lr", False)
    assert asked == ["stuck"]


def test_request_help_without_a_person(tmp_path):
    env = make_env(tmp_path / "a", interactive=True)
    assert act(env, "Request Help", request="x") == ("EnvError: no person is attending this run", True)

    def hang_up(_q):
        raise EOFError()

    env = make_env(tmp_path / "b", interactive=True, ask_human=hang_up)
    obs, err = act(env, "Request Help", request="x")
    assert err and obs.startswith("EnvError: no answer came from the person attending the run")
    env = make_env(tmp_path / "c")
    obs, err = act(env, "Request Help", request="x")
    assert err and obs.startswith("EnvError: unknown action 'Request Help'")


def test_llm_actions_without_a_model(env):
    for name, args in [("Understand File", {"file_name": "train.py", "things_to_look_for": "x"}),
                       ("Edit Script (AI)", {"script_name": "train.py", "edit_instruction": "x",
                                             "save_name": "t2.py"}),
                       ("Reflection", {"things_to_reflect_on": "x"}),
                       ("Retrieval from Research Log", {"current_plan": "x"})]:
        assert act(env, name, **args) == \
            ("EnvError: this run has no language model, so this action is unavailable", True)
    assert not (env.workspace / "t2.py").exists()


# ---- path escapes -------------------------------------------------------------------------------

def plant_symlinks(env: Environment, tmp_path: Path) -> None:
    """Symlinks out of the workspace, made the way an agent could: by a script."""
    (env.workspace / "plant.py").write_text(
        "import os\n"
        f"os.symlink({str(tmp_path / 'outside.txt')!r}, 'evil.txt')\n"
        f"os.symlink({str(tmp_path / 'outside_dir')!r}, 'evil_dir')\n"
        f"os.symlink({str(tmp_path / 'taskdata' / 'hidden' / 'answers.csv')!r}, 'answers.csv')\n"
        "os.symlink('../outside.txt', 'evil_rel.txt')\n"
        "os.symlink('evil_dir', 'evil_dir2')\n"
        "print('planted')\n")
    obs, err = act(env, "Execute Script", script_name="plant.py")
    assert not err and "planted" in obs, obs
    assert os.path.islink(env.workspace / "evil_dir2")


ESCAPES = ["../outside.txt", "ABS", "evil.txt", "evil_rel.txt", "answers.csv", "evil_dir/x.txt",
           "evil_dir2/x.txt", "data/../../outside.txt"]


def _escape(tmp_path, given):
    return str(tmp_path / "outside.txt") if given == "ABS" else given


def _refused(obs, err):
    return err and ("points outside the workspace" in obs or "absolute paths are not allowed" in obs)


@pytest.mark.parametrize("given", ESCAPES)
def test_escapes_refused_for_read_inspect_copy(env, tmp_path, given):
    plant_symlinks(env, tmp_path)
    path = _escape(tmp_path, given)
    for name, args in [("Read File", {"file_name": path}),
                       ("Inspect Script Lines", {"script_name": path, "start_line_number": 1,
                                                 "end_line_number": 5}),
                       ("Copy File", {"source": path, "destination": "stolen.txt"}),
                       ("Copy File", {"source": "train.py", "destination": path})]:
        obs, err = act(env, name, **args)
        assert _refused(obs, err), (name, obs)
        assert "outside x" not in obs and SECRET not in obs and "outside\n" not in obs
    assert not (env.workspace / "stolen.txt").exists()
    assert (tmp_path / "outside.txt").read_text() == "outside\n"
    assert (tmp_path / "outside_dir" / "x.txt").read_text() == "outside x\n"


@pytest.mark.parametrize("given", ESCAPES + ["newdir/../../new_outside.txt", "evil_dir/new.txt"])
def test_escapes_refused_for_writes(env, tmp_path, given):
    plant_symlinks(env, tmp_path)
    path = _escape(tmp_path, given)
    for name, args in [("Write File", {"file_name": path, "content": "pwned"}),
                       ("Append File", {"file_name": path, "content": "pwned"}),
                       ("Undo Edit Script", {"script_name": path})]:
        obs, err = act(env, name, **args)
        assert _refused(obs, err), (name, obs)
    assert (tmp_path / "outside.txt").read_text() == "outside\n"
    assert not (tmp_path / "new_outside.txt").exists()
    assert sorted(os.listdir(tmp_path / "outside_dir")) == ["x.txt"]


@pytest.mark.parametrize("given", ["..", "/", "ABS_DIR", "evil_dir", "evil_dir2", "data/../.."])
def test_escapes_refused_for_list(env, tmp_path, given):
    plant_symlinks(env, tmp_path)
    obs, err = act(env, "List Files", dir_path=str(tmp_path / "outside_dir") if given == "ABS_DIR" else given)
    assert _refused(obs, err), obs
    assert "x.txt" not in obs and "outside.txt" not in obs


@pytest.mark.parametrize("given", ["../outside.py", "ABS", "evil.py", "evil_dir/run.py"])
def test_escapes_refused_for_execute(env, tmp_path, given):
    (tmp_path / "outside.py").write_text("print('ran outside')\n")
    (tmp_path / "outside_dir" / "run.py").write_text("print('ran outside')\n")
    plant_symlinks(env, tmp_path)
    os.symlink(tmp_path / "outside.py", env.workspace / "evil.py")
    obs, err = act(env, "Execute Script", script_name=str(tmp_path / "outside.py") if given == "ABS" else given)
    assert _refused(obs, err), obs
    assert "ran outside" not in obs


def test_symlinks_inside_the_workspace_work(env):
    os.symlink("train.py", env.workspace / "alias.py")
    assert act(env, "Read File", file_name="alias.py") == (SCRIPT, False)
    obs, err = act(env, "Execute Script", script_name="alias.py")
    assert not err and "hello from train" in obs


def test_nul_and_empty_and_long_paths(env):
    for given, expected in [("a\x00b", "NUL"), ("", "name is required"), ("   ", "name is required"),
                            ("x" * 2000, "at most 1024"), ("a/" * 100 + "y" * 300, "")]:
        obs, err = act(env, "Write File", file_name=given, content="x")
        assert err and obs.startswith("EnvError:") and expected in obs, obs


# ---- read-only files ----------------------------------------------------------------------------

@pytest.mark.parametrize("given", ["data/train.csv", "./data/train.csv", "data/../data/train.csv",
                                   "alias.csv", "data/new.csv", "data"])
def test_read_only_refused_for_every_writing_action(env, given):
    os.symlink("data/train.csv", env.workspace / "alias.csv")
    env.load_state_dict({"backups": {"data/train.csv": [env.s.store.store_bytes(b"old,version\n")]}})
    for name, args in [("Write File", {"file_name": given, "content": "x"}),
                       ("Append File", {"file_name": given, "content": "x"}),
                       ("Copy File", {"source": "train.py", "destination": given}),
                       ("Undo Edit Script", {"script_name": given})]:
        obs, err = act(env, name, **args)
        assert err and obs.startswith("EnvError:"), (name, obs)
        if given != "data":
            assert "read-only" in obs, (name, obs)
    assert (env.workspace / "data" / "train.csv").read_text() == TRAIN
    assert not (env.workspace / "data" / "new.csv").exists()


def test_read_only_patterns_normalized(tmp_path):
    env = make_env(tmp_path, )
    env.s.read_only_patterns = ["./data/"]
    obs, err = act(env, "Write File", file_name="data/other.csv", content="x")
    assert err and "read-only" in obs


def test_writing_the_workspace_itself_refused(env):
    obs, err = act(env, "Write File", file_name=".", content="x")
    assert err and "workspace folder itself" in obs


# ---- undo ---------------------------------------------------------------------------------------

def test_undo_restores_versions_in_order_and_survives_state_round_trip(tmp_path, env):
    for version in ("v1\n", "v2\n", "v3\n"):
        act(env, "Write File", file_name="train.py", content=version)
    obs, err = act(env, "Undo Edit Script", script_name="train.py")
    assert not err and obs == "train.py is back to its previous version:\nv2\n"
    state = json.loads(json.dumps(env.state_dict()))
    assert state == {"backups": {"train.py": state["backups"]["train.py"]}}
    assert len(state["backups"]["train.py"]) == 2

    resumed = Environment(env.s)
    resumed.load_state_dict(state)
    assert (resumed.workspace / "train.py").read_text() == "v2\n"
    assert act(resumed, "Undo Edit Script", script_name="train.py")[0].endswith("\nv1\n")
    assert act(resumed, "Undo Edit Script", script_name="./train.py")[0].endswith("\n" + SCRIPT)
    obs, err = act(resumed, "Undo Edit Script", script_name="train.py")
    assert err and obs == "EnvError: there is no earlier version of 'train.py' to go back to"
    assert resumed.state_dict() == {"backups": {}}


def test_undo_after_append_copy_and_delete(env):
    act(env, "Append File", file_name="train.py", content="print(2)\n")
    act(env, "Copy File", source="data/train.csv", destination="train.py")
    assert (env.workspace / "train.py").read_text() == TRAIN
    act(env, "Undo Edit Script", script_name="train.py")
    assert (env.workspace / "train.py").read_text() == SCRIPT + "print(2)\n"
    (env.workspace / "train.py").unlink()  # a script may delete it: undo brings it back
    act(env, "Undo Edit Script", script_name="train.py")
    assert (env.workspace / "train.py").read_text() == SCRIPT
    obs, err = act(env, "Undo Edit Script", script_name="never_edited.py")
    assert err and "no earlier version" in obs


def test_undo_after_many_appends_restores_each_version_exactly(env):
    versions = [SCRIPT]
    for i in range(5):
        act(env, "Append File", file_name="train.py", content=f"print({i})\n")
        versions.append(versions[-1] + f"print({i})\n")
    act(env, "Append File", file_name="fresh.txt", content="one\n")
    act(env, "Append File", file_name="fresh.txt", content="two\n")
    assert (env.workspace / "train.py").read_text() == versions[-1]
    resumed = Environment(env.s)  # the versions kept survive a resume
    resumed.load_state_dict(json.loads(json.dumps(env.state_dict())))
    for expected in reversed(versions[:-1]):
        obs, err = act(resumed, "Undo Edit Script", script_name="train.py")
        assert not err and (resumed.workspace / "train.py").read_text() == expected
    assert "no earlier version" in act(resumed, "Undo Edit Script", script_name="train.py")[0]
    act(resumed, "Undo Edit Script", script_name="fresh.txt")
    assert (resumed.workspace / "fresh.txt").read_text() == "one\n"


def test_append_adds_in_place_and_keeps_mode(env):
    """An append writes only the new bytes (the file keeps its inode and mode), not a rewritten copy."""
    log = env.workspace / "log.txt"
    log.write_text("a\n")
    log.chmod(0o600)
    before = log.stat()
    assert act(env, "Append File", file_name="log.txt", content="b\n") == ("Appended 2 characters to log.txt.", False)
    after = log.stat()
    assert log.read_text() == "a\nb\n" and after.st_ino == before.st_ino and after.st_mode == before.st_mode


def test_append_to_a_hard_linked_file_leaves_the_other_link_alone(env, tmp_path):
    """A workspace file hard-linked to one elsewhere (agent code can make such links) is replaced, never
    written through: the other name keeps its content."""
    other = tmp_path / "outside_hardlink.txt"
    other.write_text("outside\n")
    os.link(other, env.workspace / "linked.txt")
    obs, err = act(env, "Append File", file_name="linked.txt", content="more\n")
    assert not err, obs
    assert other.read_text() == "outside\n"
    assert (env.workspace / "linked.txt").read_text() == "outside\nmore\n"
    act(env, "Undo Edit Script", script_name="linked.txt")
    assert (env.workspace / "linked.txt").read_text() == "outside\n" and other.read_text() == "outside\n"


def test_the_snapshot_after_an_append_holds_it(env):
    env.s.store.record(env.workspace, "before")
    act(env, "Append File", file_name="train.py", content="print(2)\n")
    manifest = env.s.store.take(env.workspace, "after", changes=env.s.store.changes)
    assert manifest["train.py"]["size"] == len(SCRIPT) + 9


def test_load_state_dict_tolerates_junk(env):
    for junk in [None, {}, {"backups": None}, {"backups": {"a": None, "b": [1, None]}}, "x"]:
        env.load_state_dict(junk)
        assert env.state_dict() == {"backups": {}}
    env.load_state_dict({"backups": {"train.py": ["0" * 64]}})  # an object the store does not have
    obs, err = act(env, "Undo Edit Script", script_name="train.py")
    assert err and "no longer stored" in obs
    assert (env.workspace / "train.py").read_text() == SCRIPT


# ---- Inspect Script Lines -----------------------------------------------------------------------

@pytest.fixture
def long_script(env):
    (env.workspace / "long.py").write_text("".join(f"x{i} = {i}\n" for i in range(1, 251)))
    return env


def test_inspect_numbering_and_limits(long_script):
    env = long_script
    obs, err = act(env, "Inspect Script Lines", script_name="long.py", start_line_number=1,
                   end_line_number=MAX_INSPECT_LINES)
    assert not err
    lines = obs.splitlines()
    assert lines[0] == "long.py has 250 lines. Lines 1 to 100:"
    assert lines[1] == "1: x1 = 1" and lines[-1] == "100: x100 = 100" and len(lines) == 101
    obs, err = act(env, "Inspect Script Lines", script_name="long.py", start_line_number="240",
                   end_line_number="300")
    assert not err and obs.splitlines()[0] == "long.py has 250 lines. Lines 240 to 250:"
    assert obs.splitlines()[-1] == "250: x250 = 250"


@pytest.mark.parametrize("start,end,expected", [
    (1, 101, "at most 100 lines at a time (asked for 101)"),
    (0, 5, "line numbers start at 1"),
    (10, 5, "the end cannot come before the start"),
    (251, 260, "has 250 lines, so there is no line 251"),
])
def test_inspect_bad_ranges(long_script, start, end, expected):
    obs, err = act(long_script, "Inspect Script Lines", script_name="long.py", start_line_number=start,
                   end_line_number=end)
    assert err and expected in obs


def test_inspect_odd_files(env):
    ws = env.workspace
    (ws / "empty.py").write_text("")
    (ws / "crlf.txt").write_bytes(b"a\r\nb\r\nc")
    (ws / "wide.csv").write_text("h\n" + "y" * 50_000 + "\nlast\n")
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    assert act(env, "Inspect Script Lines", script_name="empty.py", start_line_number=1,
               end_line_number=3) == ("EnvError: 'empty.py' is empty", True)
    assert act(env, "Inspect Script Lines", script_name="crlf.txt", start_line_number=1,
               end_line_number=3)[0] == "crlf.txt has 3 lines. Lines 1 to 3:\n1: a\n2: b\n3: c"
    obs, err = act(env, "Inspect Script Lines", script_name="wide.csv", start_line_number=1, end_line_number=3)
    assert not err and "[... rest of this long line left out]" in obs and obs.endswith("3: last")
    assert len(obs) < 3_000
    obs, err = act(env, "Inspect Script Lines", script_name="blob.bin", start_line_number=1, end_line_number=3)
    assert err and "binary" in obs
    obs, err = act(env, "Inspect Script Lines", script_name="data", start_line_number=1, end_line_number=3)
    assert err and "is a folder" in obs
    obs, err = act(env, "Inspect Script Lines", script_name="missing.py", start_line_number=1,
                   end_line_number=3)
    assert err and obs == "EnvError: file 'missing.py' does not exist"


# ---- robustness: odd things in the workspace ---------------------------------------------------

def test_symlink_loop(env):
    os.symlink("loop_a", env.workspace / "loop_b")
    os.symlink("loop_b", env.workspace / "loop_a")
    os.symlink("self", env.workspace / "self")
    loop = "cannot be opened: Too many levels of symbolic links"
    for name, args, expected in [
        ("Read File", {"file_name": "loop_a"}, loop),
        ("List Files", {"dir_path": "self"}, loop),
        ("Append File", {"file_name": "self", "content": "x"}, loop),
        ("Inspect Script Lines", {"script_name": "self", "start_line_number": 1, "end_line_number": 2}, loop),
        ("Copy File", {"source": "loop_a", "destination": "c.txt"}, loop),
        ("Understand File", {"file_name": "self", "things_to_look_for": "x"}, loop),
        ("Execute Script", {"script_name": "self"}, "does not exist"),
        ("Undo Edit Script", {"script_name": "self"}, "no earlier version"),
    ]:
        obs, err = act(env, name, **args)
        assert err and obs.startswith("EnvError:") and expected in obs, (name, obs)
    obs, err = act(env, "List Files", dir_path=".")
    assert not err and obs.split("\n") == ["data/", "loop_a", "loop_b", "self", "train.py"]
    # Writing to a looping name replaces the link with a file.
    assert act(env, "Write File", file_name="self", content="x") == ("File self written (1 characters).", False)
    assert (env.workspace / "self").read_text() == "x"


@pytest.mark.timeout(20)
def test_fifo_does_not_block(env):
    os.mkfifo(env.workspace / "pipe")
    for name, args in [("Read File", {"file_name": "pipe"}),
                       ("Inspect Script Lines", {"script_name": "pipe", "start_line_number": 1,
                                                 "end_line_number": 2}),
                       ("Copy File", {"source": "pipe", "destination": "c.txt"}),
                       ("Append File", {"file_name": "pipe", "content": "x"}),
                       ("Execute Script", {"script_name": "pipe"})]:
        obs, err = act(env, name, **args)
        assert err and obs.startswith("EnvError:"), (name, obs)
    assert "pipe" in act(env, "List Files", dir_path=".")[0]


def test_huge_sparse_file(env):
    big = env.workspace / "big.txt"
    with open(big, "wb") as f:
        f.write(b"".join(b"row %d\n" % i for i in range(2000)))  # text first, then 1 GB of holes
        f.truncate(2**30)
    obs, err = act(env, "Read File", file_name="big.txt")
    assert err and "1073741824 bytes, more than the" in obs and "Inspect Script Lines" in obs
    obs, err = act(env, "Copy File", source="big.txt", destination="big2.txt")
    assert err and "more than" in obs and not (env.workspace / "big2.txt").exists()
    obs, err = act(env, "Append File", file_name="big.txt", content="x")
    assert err and "more than" in obs
    obs, err = act(env, "Inspect Script Lines", script_name="big.txt", start_line_number=5, end_line_number=6)
    assert not err and obs.endswith("5: row 4\n6: row 5") and "more than" in obs.splitlines()[0]
    obs, err = act(env, "Write File", file_name="big.txt", content="small now\n")
    assert not err and "too large to keep" in obs
    assert big.stat().st_size == 10


def test_read_file_on_folders_and_binaries(env):
    obs, err = act(env, "Read File", file_name="data")
    assert err and "is a folder, not a file; use List Files" in obs
    obs, err = act(env, "Read File", file_name=".")
    assert err and "is a folder" in obs
    (env.workspace / "model.pt").write_bytes(b"PK\x03\x04\x00\x00binary")
    obs, err = act(env, "Read File", file_name="model.pt")
    assert err and obs == "EnvError: 'model.pt' is a binary file, not text"
    obs, err = act(env, "List Files", dir_path="train.py")
    assert err and obs == "EnvError: 'train.py' is a file, not a folder"
    obs, err = act(env, "List Files", dir_path="nope")
    assert err and obs == "EnvError: folder 'nope' does not exist"
    os.symlink("gone.txt", env.workspace / "dangling.txt")
    obs, err = act(env, "Read File", file_name="dangling.txt")
    assert err and "does not exist" in obs


def test_write_through_a_file_as_folder(env):
    obs, err = act(env, "Write File", file_name="train.py/inner.txt", content="x")
    assert err and obs.startswith("EnvError:")
    assert (env.workspace / "train.py").read_text() == SCRIPT


def test_research_log_symlink_out_is_refused(env, tmp_path):
    os.symlink(tmp_path / "taskdata" / "hidden" / "answers.csv", env.workspace / "research_log.log")
    obs, err = act(env, "Append Summary to Research Log", content="note")
    assert err and "outside the workspace" in obs
    assert (tmp_path / "taskdata" / "hidden" / "answers.csv").read_text() == SECRET + "\n"
    env.s.llm = scripted_llm(fast=["thoughts"])
    env.llm_actions.llm = env.s.llm
    obs, err = act(env, "Reflection", things_to_reflect_on="what next?")
    assert err and "outside the workspace" in obs and SECRET not in obs
    assert env.s.llm.backends["fast"].position == 0  # nothing was sent to the model


def test_execute_rejects_non_python_and_missing(env):
    (env.workspace / "run.sh").write_text("echo hi\n")
    assert act(env, "Execute Script", script_name="run.sh") == \
        ("EnvError: only Python scripts (.py) can be executed, not 'run.sh'", True)
    assert act(env, "Execute Script", script_name="nope.py") == \
        ("EnvError: script 'nope.py' does not exist", True)
    assert act(env, "Execute Script", script_name="data") == ("EnvError: 'data' is a folder, not a script", True)


def test_script_named_like_an_option(env):
    (env.workspace / "-c.py").write_text("print('dash ok')\n")
    obs, err = act(env, "Execute Script", script_name="-c.py")
    assert not err and "dash ok" in obs


# ---- Python REPL --------------------------------------------------------------------------------

def test_repl_keeps_its_namespace_and_shows_the_last_value(env):
    assert act(env, "Python REPL", command="import os\nx = 41") == ("", False)
    assert act(env, "Python REPL", command="x + 1") == ("42\n", False)
    obs, err = act(env, "Python REPL", command="print(os.getcwd())\nNone")
    assert (obs, err) == (".\n", False)  # the workspace as the agent knows it, not the host's path
    obs, err = act(env, "Python REPL", command="open('data/train.csv', 'w').write('hacked')")
    # Refused by a read-only mount, or put back afterwards where the sandbox has no mount namespace.
    assert "Read-only file system" in obs or "have been restored: data/train.csv" in obs, obs
    assert (env.workspace / "data" / "train.csv").read_text() == TRAIN


def test_repl_child_program_needs_only_the_standard_library():
    import ast
    import sys

    import mlab.core.run.repl as repl

    tree = ast.parse(repl._SERVER)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported and imported <= set(sys.stdlib_module_names)


def test_limit_messages_name_the_limits():
    from mlab.core.run.limit_messages import limit_messages

    told = limit_messages(Limits(memory_bytes=3 * 2**30, file_size_bytes=512, disk_bytes=None,
                                 min_free_disk_bytes=100 * 2**20))
    assert told["memory"] == "hit the memory limit (3 GiB) and was stopped"
    assert "limit of 512 bytes" in told["file_size"]
    assert told["disk"].startswith("used too much disk space (at least 100 MiB must stay free)")
