"""The MLAgentBench tasks on raw data of the originals' shapes (tests/fixtures/real_shapes.py): fathomnet's 16,694
images and identify-contrails' 244,379 arrays prepare into workspaces of the real counts and layout; cifar10's
batches and babylm's corpus prepare without the pack noting a size other than the original's. In every sandbox
a script over each workspace reads the data, lists its folders and cannot write a read-only file, and (but for
babylm, whose score is a trained model's) a script makes a submission from the test data that the task scores
at its real size, as check-task scores the reference's.

Slow tier. The raw data is generated once and kept (real_shapes.cached: deleting 244,381 files costs this disk
minutes). Everything here shares one worker (the docker group) and, per task, one prepared home and one
workspace made the harness's way: a contrails workspace links 244,379 read-only arrays and takes a while on a
loaded two-core machine, so one is made, not one per sandbox.
The starters (and so baseline and check-task) take minutes to hours on this data, even the CPU-scaled
variants': benchmarks/real_shapes.py runs check-task of each task in each sandbox. So does babylm's scoring (a
saved model evaluated in the sandbox: minutes a sandbox here), which is why babylm has no submission case.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from mlab.core.models import Action
from mlab.core.plugins.registry import load_registry
from mlab.core.run.harness import Harness
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.taskdata import TaskHome
from mlab.core.task import Task
from tests.fixtures import real_shapes
from tests.fixtures.lazy import lazy
from tests.fixtures.sandboxes import CONFINING
from tests.test_sandbox import make_sandbox

pd = lazy("pandas")

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docker")]

SANDBOXES = CONFINING  # every registered sandbox that confines (tests/fixtures/sandboxes.py)
TASKS = {"fathomnet": "mlagentbench/fathomnet", "identify-contrails": "mlagentbench/identify-contrails",
         "cifar10": "mlagentbench/cifar10", "babylm": "mlagentbench/babylm"}
BABYLM_SCALE = 0.05  # 1.5M words, 9 MB: the real 175 MB adds nothing a prepare that copies three folders shows


@dataclass
class Prepared:
    task: Task
    home: TaskHome
    workspace: Path  # one made by the harness from the prepared task, shared by the sandbox cases
    raw: real_shapes.Written


def same_disk(a: Path, b: Path) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


def prepare(name: str, root: Path, **options: object) -> Prepared:
    """The raw data (cached across sessions), the task prepared from it in a home of this session, and a
    workspace staged from that. The home sits on the data's disk: prepare hard-links the arrays, and a copy of
    a sparse array would write all of its megabyte."""
    cache = real_shapes.cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    raw = real_shapes.cached(name, cache if same_disk(cache, root) else root / "raw", **options)
    harness = Harness(load_registry(), TaskHome(root / "home"), sandbox="local")
    task = harness.task(TASKS[name])
    notes: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLAB_ALLOW_NO_GPU", "1")  # the GPU tasks themselves, as the pack's tests prepare them
        harness.prepare(task, raw.data_dir, log=notes.append)
    # The pack notes a copy whose sizes are not the original's (cifar10's batches, babylm's tokenizer).
    assert not [n for n in notes if n.startswith("note:")], notes
    return Prepared(task, harness.home, harness.new_workspace(task, root / "workspace"), raw)


@pytest.fixture(scope="session")
def prepared(tmp_path_factory):
    made: dict[str, Prepared] = {}

    def get(name: str) -> Prepared:
        if name not in made:
            options = {"scale": BABYLM_SCALE} if name == "babylm" else {}
            made[name] = prepare(name, tmp_path_factory.mktemp(f"real-{name}"), **options)
        return made[name]

    yield get
    for p in made.values():  # a quarter of a million links and copies: not left for a later session to remove
        shutil.rmtree(p.workspace, ignore_errors=True)
        shutil.rmtree(p.home.root, ignore_errors=True)


def listing(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


# ---- prepare -------------------------------------------------------------------------------------------
def test_fathomnet_prepares_every_image_of_the_real_shaped_data(prepared):
    p = prepared("fathomnet")
    public, hidden = p.home.public_dir(p.task), p.home.hidden_dir(p.task)
    assert p.raw.counts["train images"] == 5_950 and p.raw.counts["eval images"] == 10_744
    assert len(listing(p.raw.folder / "images")) == 16_694
    train = pd.read_csv(public / "multilabel_classification" / "train.csv")
    held_out = pd.read_csv(hidden / "answer.csv")
    assert (len(train), len(held_out)) == (5_831, 119)  # the original's split: 98% / 2% of 5,950
    detection = json.loads((public / "object_detection" / "train.json").read_text())
    evaluation = json.loads((public / "object_detection" / "eval.json").read_text())
    assert len(detection["images"]) == 5_831 and len(evaluation["images"]) == 119
    assert len(detection["categories"]) == 290
    # Only the images of train.json are copied: the Kaggle evaluation set's 10,744 have no labels to score.
    images = listing(public / "images")
    assert images == sorted(x["file_name"] for x in detection["images"] + evaluation["images"])
    sizes = [os.stat(public / "images" / name).st_size for name in images[:200]]
    assert min(sizes) >= 15_000 and max(sizes) <= 64 * 1024  # tens of KB, as FATHOMNET_IMAGE_KB asks
    assert listing(p.workspace / "images") == images
    with open(p.workspace / "images" / images[0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_contrails_prepares_every_record_of_the_real_shaped_data(prepared):
    p = prepared("identify-contrails")
    public, hidden = p.home.public_dir(p.task), p.home.hidden_dir(p.task)
    raw_train = listing(p.raw.folder / "train")
    assert len(raw_train) == 20_529 and len(listing(p.raw.folder / "validation")) == 1_856
    assert listing(public / "train") == raw_train
    bands = [f"band_{b:02d}.npy" for b in range(8, 17)]
    record = raw_train[0]
    assert listing(public / "train" / record) == bands + ["human_individual_masks.npy", "human_pixel_masks.npy"]
    assert sum(len(os.listdir(public / "train" / r)) for r in raw_train) == 20_529 * 11
    test_records = listing(public / "test")
    assert len(test_records) == 1_856 and listing(public / "test" / test_records[0]) == bands
    with np.load(hidden / "masks.npz") as masks:
        assert sorted(masks.files) == test_records and masks[test_records[0]].shape == (256, 256)
    # Read-only files reach the workspace as hard links to the prepared copy, the 1 MB bands and 256 KB masks alike.
    band = public / "train" / record / "band_11.npy"
    staged = p.workspace / "train" / record
    assert os.stat(staged / "band_11.npy").st_ino == os.stat(band).st_ino
    assert os.stat(staged / "human_pixel_masks.npy").st_ino == os.stat(public / "train" / record /
                                                                         "human_pixel_masks.npy").st_ino
    array = np.load(staged / "band_11.npy")
    assert array.shape == (256, 256, 8) and array.dtype == np.float16 and os.stat(band).st_size == 1_048_704
    assert len(listing(p.workspace / "train")) == 20_529 and len(listing(p.workspace / "test")) == 1_856


def test_cifar10_and_babylm_prepare_from_their_real_shaped_data(prepared):
    import pickle

    p = prepared("cifar10")
    data = p.workspace / "data" / "cifar-10-batches-py"
    assert listing(data) == ["batches.meta", *(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]
    assert 30_900_000 < os.stat(data / "data_batch_1").st_size < 31_100_000  # the original's 31,035,704 bytes
    with open(data / "test_batch", "rb") as f:
        test = pickle.load(f, encoding="bytes")
    assert test[b"data"].shape == (10_000, 3072) and b"labels" not in test
    assert np.load(p.home.hidden_dir(p.task) / "test_labels.npy").shape == (10_000,)

    p = prepared("babylm")
    corpus = p.workspace / "babylm_data"
    assert listing(corpus) == ["babylm_10M", "babylm_dev"]
    sources = sorted(real_shapes.BABYLM_WORDS)
    assert listing(corpus / "babylm_10M") == [f"{s}.train" for s in sources]
    assert listing(corpus / "babylm_dev") == [f"{s}.dev" for s in sources]
    assert listing(p.home.hidden_dir(p.task) / "babylm_test") == [f"{s}.test" for s in sources]
    assert len(json.loads((p.workspace / "gpt2" / "vocab.json").read_text())) == 50_257


# ---- a script over the workspace, in every sandbox ------------------------------------------------------
PROBE = {
    "fathomnet": ("images", "import json\n"
                  "names = sorted(os.listdir('images'))\n"
                  "from PIL import Image\n"
                  "for name in names[:3]:\n"
                  "    with Image.open('images/' + name) as img:\n"
                  "        img.convert('RGB').load()\n"
                  "print('read', len(names[:3]), 'images of', img.size)\n"
                  "print('eval', len(json.load(open('object_detection/eval.json'))['images']))\n"),
    "identify-contrails": ("train", "import numpy as np\n"
                           "names = sorted(os.listdir('train'))\n"
                           "for name in names[:3]:\n"
                           "    array = np.load(f'train/{name}/band_11.npy')\n"
                           "print('read', len(names[:3]), 'records of', array.shape)\n"
                           "print('files', sum(len(os.listdir('train/' + n)) for n in names))\n"
                           "print('test', len(os.listdir('test')))\n"),
    "cifar10": ("data/cifar-10-batches-py", "import pickle\n"
                "folder = 'data/cifar-10-batches-py'\n"
                "with open(folder + '/data_batch_3', 'rb') as f:\n"
                "    batch = pickle.load(f, encoding='bytes')\n"
                "print('batch', batch[b'data'].shape, len(batch[b'labels']))\n"),
    "babylm": ("babylm_data/babylm_10M", "import json\n"
               "folder = 'babylm_data/babylm_10M'\n"
               "words = sum(len(open(os.path.join(folder, n)).read().split()) for n in os.listdir(folder))\n"
               "print('words', words)\n"
               "print('vocab', len(json.load(open('gpt2/vocab.json'))))\n"),
}
WRITE = ("target = os.path.join({folder!r}, sorted(os.listdir({folder!r}))[0])\n"
         "target = os.path.join(target, sorted(os.listdir(target))[0]) if os.path.isdir(target) else target\n"
         "for what, act in (('write', lambda: open(target, 'r+b').write(b'x')),\n"
         "                  ('add', lambda: open(os.path.join({folder!r}, 'new'), 'w').write('x')),\n"
         "                  ('remove', lambda: os.unlink(target))):\n"
         "    try:\n        act()\n        print(what, 'done')\n"
         "    except OSError as e:\n        print(what, 'refused', e.strerror)\n"
         "print('listed', len(os.listdir({folder!r})), {folder!r})\n"
         "ws = os.getcwd()\n"
         "below = [l for l in open('/proc/self/mountinfo') if l.split()[4].startswith(ws + '/')]\n"
         "print('mounts below the workspace', len(below))\n")


def first_file(folder: Path) -> Path:
    target = folder / listing(folder)[0]
    return target / listing(target)[0] if target.is_dir() else target


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("name", list(PROBE))
def test_a_script_reads_and_lists_the_real_shaped_workspace_and_cannot_write_its_data(prepared, name, sandbox,
                                                                                       tmp_path):
    box = make_sandbox(sandbox)  # skips, or fails in CI, with the reason when the sandbox is missing
    p = prepared(name)
    folder, code = PROBE[name]
    target = first_file(p.workspace / folder)
    before = (target.read_bytes()[:8192], os.stat(target).st_size, len(os.listdir(p.workspace / folder)))
    harness = Harness(load_registry(), p.home, sandbox=sandbox)
    env = harness.environment(p.task, p.workspace, store=SnapshotStore(tmp_path / "store"),
                              sandbox_home=tmp_path / "home", timeout_s=120, sandbox=box)
    script = f"probe_{sandbox}.py"
    try:
        (p.workspace / script).write_text("import os\n" + code + WRITE.format(folder=folder))
        obs, err = env.execute(Action(name="Execute Script", args={"script_name": script}))
    finally:
        env.close()
        (p.workspace / script).unlink()
    assert not err, obs
    count = {"fathomnet": 5_950, "identify-contrails": 20_529, "cifar10": 7, "babylm": 10}[name]
    assert f"listed {count} {folder}" in obs, obs
    assert obs.count("refused") == 3, obs
    # A folder of thousands of read-only entries is one mount, not one per entry (small folders keep a mount
    # per file: at most 32 each).
    below = int(obs.split("mounts below the workspace")[1].split()[0])
    assert below < 100, obs
    if name == "fathomnet":
        assert "read 3 images of (64," in obs and "eval 119" in obs, obs
    elif name == "identify-contrails":
        assert "read 3 records of (256, 256, 8)" in obs and f"files {20_529 * 11}" in obs and "test 1856" in obs
    elif name == "cifar10":
        assert "batch (10000, 3072) 10000" in obs, obs
    else:
        words = sum(round(n * BABYLM_SCALE) for n in real_shapes.BABYLM_WORDS.values())
        assert f"words {words}" in obs and "vocab 50257" in obs, obs
    after = (target.read_bytes()[:8192], os.stat(target).st_size, len(os.listdir(p.workspace / folder)))
    assert after == before


# ---- a submission made in every sandbox, scored as check-task scores one -------------------------------
# A quick "solution" per task, standing in for the starter (minutes to hours on this data: see
# benchmarks/real_shapes.py): it reads the real-shaped test data in the sandbox and writes a submission the task
# scores at its real size (10,000 cifar10 rows, 1,856 contrails masks, fathomnet's held-out images).
SOLUTION = {
    "cifar10": "import pickle\n"
               "with open('data/cifar-10-batches-py/test_batch', 'rb') as f:\n"
               "    n = len(pickle.load(f, encoding='bytes')[b'data'])\n"
               "with open('submission.csv', 'w') as f:\n"
               "    f.write(',' + ','.join(map(str, range(10))) + '\\n')\n"
               "    f.writelines(f'{i},0.9' + ',0.01' * 9 + '\\n' for i in range(n))\n"  # class 0 for every image
               "print('rows', n)\n",
    "fathomnet": "import json\n"
                 "ids = [x['file_name'][:-4] for x in json.load(open('object_detection/eval.json'))['images']]\n"
                 "with open('submission.csv', 'w') as f:\n"
                 "    f.write('id,categories,osd\\n')\n"
                 "    f.writelines(f'{i},1 2 3,0.5\\n' for i in ids)\n"
                 "print('rows', len(ids))\n",
    "identify-contrails": "import os\n"
                          "records = sorted(os.listdir('test'))\n"
                          "with open('submission.csv', 'w') as f:\n"
                          "    f.write('record_id,encoded_pixels\\n')\n"
                          "    f.writelines(f'{r},1 256\\n' for r in records)\n"  # the first column of each mask
                          "print('rows', len(records))\n",
}


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("name", list(SOLUTION))
def test_a_submission_made_in_the_sandbox_from_the_real_shaped_data_is_scored(prepared, name, sandbox, tmp_path):
    box = make_sandbox(sandbox)
    p = prepared(name)
    harness = Harness(load_registry(), p.home, sandbox=sandbox)
    env = harness.environment(p.task, p.workspace, store=SnapshotStore(tmp_path / "store"),
                              sandbox_home=tmp_path / "home", timeout_s=300, sandbox=box)
    script, submission = p.workspace / f"solve_{sandbox}.py", p.workspace / "submission.csv"
    try:
        script.write_text(SOLUTION[name])
        obs, err = env.execute(Action(name="Execute Script", args={"script_name": script.name}))
        assert not err, obs
        score, error = harness.scorer.score_folder(p.task, p.workspace)
        expected = p.task.evaluate(p.workspace, p.home.hidden_dir(p.task))  # outside any sandbox
    finally:
        env.close()
        script.unlink()
        submission.unlink(missing_ok=True)
    assert error is None and score == expected, (score, error)
    hidden = p.home.hidden_dir(p.task)
    if name == "cifar10":
        assert "rows 10000" in obs
        assert score == float((np.load(hidden / "test_labels.npy") == 0).mean())
    elif name == "fathomnet":
        assert "rows 119" in obs and 0 <= score <= 1
    else:
        assert "rows 1856" in obs and 0 <= score <= 1
