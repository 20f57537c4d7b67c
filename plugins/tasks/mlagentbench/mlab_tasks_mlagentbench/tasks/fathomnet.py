"""fathomnet (Kaggle fathomnet-out-of-sample-detection): multi-label classification of sea-floor images.

Split as the original: the competition's multilabel train.csv shuffled with pandas (random_state=42), first 98%
train, the rest held out (with their images listed in object_detection/eval.json). Images come from the
FathomNet URLs in object_detection/train.json. Fix of the original's bug: it scored the out-of-sample half of
the metric against random flags; every held-out image is in-sample, so that half cannot be measured and the
score is the category MAP@20 alone.
"""
from __future__ import annotations

import json
import re
import shutil
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mlab.core import DataFile, InvalidSubmission, Metric, MlabError, PrepareContext, Resources

from .. import acquire
from ..base import ORIGINAL_FIXED_BASELINE, PACK, MLAgentBenchTask
from ..submission import align, numbers, read_csv, require_columns

COMPETITION = "fathomnet-out-of-sample-detection"
REQUIRED = ["multilabel_classification/train.csv", "object_detection/train.json", "category_key.csv"]
_NUMBER = re.compile(r"\d+(?:\.\d*)?")
_IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff")


def category_ids(text) -> list[int]:
    """'1 9 11', '[1.0, 9.0]' or '1.0 9.0' -> [1, 9, 11], keeping order."""
    return [int(float(n)) for n in _NUMBER.findall(str(text))] if str(text) not in ("nan", "") else []


def average_precision_at_k(actual: list[int], predicted: list[int], k: int = 20) -> float:
    if not actual:
        return 0.0
    predicted = predicted[:k]
    hits, score = 0, 0.0
    for i, p in enumerate(predicted):
        if p in actual and p not in predicted[:i]:
            hits += 1
            score += hits / (i + 1)
    return score / min(len(actual), k)


def fetch_image(url: str, target: Path, timeout: float = 60.0) -> str | None:
    """Download one image; returns an error text instead of raising."""
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "mlab-tasks-mlagentbench"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = response.read()
    except Exception as exc:
        return f"{url}: {exc}"
    if not data.startswith(_IMAGE_MAGIC):
        return f"{url}: not a PNG or JPEG image"
    part = target.with_suffix(target.suffix + ".part")
    part.write_bytes(data)
    part.replace(target)
    return None


class Fathomnet(MLAgentBenchTask):
    short = "fathomnet"
    competition = COMPETITION
    competition_files = REQUIRED
    local_check = "the annotation files are present; images are fetched from the FathomNet URLs in train.json"
    name = f"{PACK}/fathomnet"
    description = "Label the animals in FathomNet sea-floor images (290 categories); MAP@20, higher is better"
    files = "fathomnet"
    reference = "fathomnet"
    needs = {"torch": "vision", "PIL": "vision"}
    cpu_variant: str | None = f"{PACK}/fathomnet-cpu"
    metric = Metric(name="map@20", higher_is_better=True)
    fixed_baseline: float | None = 1e-10
    fixed_baseline_source = ORIGINAL_FIXED_BASELINE
    read_only_files = ["images/*", "multilabel_classification/*", "object_detection/*", "category_key.csv",
                       "evaluation_details.txt", "data_description.txt", "sample_submission.csv"]
    resources = Resources(gpu="required", ram_gb=16.0, network_for_prepare=True, baseline_seconds=1800.0,
                          extras=["vision (torch, pillow)", "kaggle (only to download)"])
    research_problem = (
        "Read data_description.txt to understand the data and the machine learning task, and keep notes in "
        "your research log. Then fill in the provided train.py script to train a model, and iterate over "
        "different models or feature selections to get a better performance. Finally, submit the predictions "
        "of your best model for the images of object_detection/eval.json as submission.csv, as described in "
        "evaluation_details.txt.\n"
        "Do not read the CSV files directly; work through scripts. Execute your changes to check how well they "
        "perform.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        import pandas as pd

        with acquire.Scratch(ctx.public_dir.parent) as scratch:
            folder = acquire.obtain_competition(ctx.source_dir, COMPETITION, REQUIRED, ["fathomnet", COMPETITION],
                                                scratch, ctx.log)
            table = pd.read_csv(folder / "multilabel_classification" / "train.csv")
            detection = json.loads((folder / "object_detection" / "train.json").read_text())
            table = table.sample(frac=1, random_state=42).reset_index(drop=True)
            cut = int(len(table) * 0.98)
            train, test = table.iloc[:cut], table.iloc[cut:]
            test_ids = set(test["id"])

            (ctx.public_dir / "multilabel_classification").mkdir()
            train.to_csv(ctx.public_dir / "multilabel_classification" / "train.csv", index=False)
            images = detection["images"]
            train_images = [dict(x) for x in images if Path(x["file_name"]).stem not in test_ids]
            test_images = [dict(x) for x in images if Path(x["file_name"]).stem in test_ids]
            new_id = {x["id"]: i + 1 for i, x in enumerate(train_images)}
            annotations = [dict(a) for a in detection.get("annotations", []) if a["image_id"] in new_id]
            for i, a in enumerate(annotations):
                a["image_id"], a["id"] = new_id[a["image_id"]], i + 1
            for x in train_images:
                x["id"] = new_id[x["id"]]
            for i, x in enumerate(test_images):
                x["id"] = i + 1
            (ctx.public_dir / "object_detection").mkdir()
            (ctx.public_dir / "object_detection" / "train.json").write_text(
                json.dumps({**detection, "images": train_images, "annotations": annotations}))
            (ctx.public_dir / "object_detection" / "eval.json").write_text(json.dumps(
                {**{k: v for k, v in detection.items() if k not in ("images", "annotations")},
                 "images": test_images}))
            shutil.copyfile(folder / "category_key.csv", ctx.public_dir / "category_key.csv")
            self._images(folder, ctx, train_images + test_images)

        test[["id", "categories"]].assign(osd=0.0).to_csv(ctx.hidden_dir / "answer.csv", index=False)
        test[["id"]].assign(categories="1 2 3", osd=0.1).to_csv(ctx.public_dir / "sample_submission.csv",
                                                               index=False)
        ctx.log(f"{self.name}: {len(train)} training images, {len(test)} held out")

    def _images(self, folder: Path, ctx: PrepareContext, images: list[dict]) -> None:
        """Copy the images from the local copy's images/ folder, or download them from FathomNet."""
        target = ctx.public_dir / "images"
        target.mkdir()
        local = folder / "images" if (folder / "images").is_dir() else (
            ctx.source_dir / "images" if ctx.source_dir and (ctx.source_dir / "images").is_dir() else None)
        missing = []
        to_fetch = []
        for image in images:
            name = image["file_name"]
            if local is not None and (local / name).is_file():
                shutil.copyfile(local / name, target / name)
            elif local is None and image.get("coco_url"):
                to_fetch.append((image["coco_url"], target / name))
            else:
                missing.append(name)
        if to_fetch:
            ctx.log(f"downloading {len(to_fetch)} images from FathomNet")
            with ThreadPoolExecutor(max_workers=16) as pool:
                errors = [e for e in pool.map(lambda job: fetch_image(*job), to_fetch) if e]
            if errors:
                raise MlabError(f"{len(errors)} of {len(to_fetch)} images failed to download, e.g. {errors[0]}; "
                                f"or put them in images/ of a local copy: {acquire.fetch_hint(self.name)}")
        if missing:
            raise MlabError(f"{len(missing)} images are missing from {local or 'train.json'}, e.g. {missing[0]}")

    def data_files(self) -> list[DataFile]:
        return super().data_files() + [DataFile(
            path=f"{self.data_folder}/images/", url="the coco_url of each image in object_detection/train.json "
            "(FathomNet)", terms="https://fathomnet.org (FathomNet terms of use)", how="download",
            check="each image a PNG or JPEG")]

    def fetch_data(self, root: Path, log: Callable[[str], None]) -> None:
        """The competition's files, then every image train.json lists that is not there yet (prepare on an
        air-gapped machine takes them from images/)."""
        super().fetch_data(root, log)
        folder = root / self.data_folder
        detection = json.loads((folder / "object_detection" / "train.json").read_text())
        (folder / "images").mkdir(exist_ok=True)
        to_fetch = [(x["coco_url"], folder / "images" / x["file_name"]) for x in detection["images"]
                    if x.get("coco_url") and not (folder / "images" / x["file_name"]).is_file()]
        log(f"downloading {len(to_fetch)} images from FathomNet")
        with ThreadPoolExecutor(max_workers=16) as pool:
            errors = [e for e in pool.map(lambda job: fetch_image(*job), to_fetch) if e]
        if errors:
            raise MlabError(f"{len(errors)} of {len(to_fetch)} images failed to download (run again to fetch the "
                            f"rest), e.g. {errors[0]}")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        import numpy as np
        import pandas as pd

        answer = pd.read_csv(Path(hidden_dir) / "answer.csv", dtype={"id": str})
        frame = read_csv(workspace, dtype={"id": str, "categories": str}, max_rows=len(answer),
                         max_bytes=self.max_submission_bytes)
        # osd is not scored (see the module's docstring) but required, as the original's metric needs it.
        require_columns(frame, ["id", "categories", "osd"])
        frame = align(frame, "id", answer["id"].tolist())
        numbers(frame, "osd")
        scores = []
        for row, (truth, predicted) in enumerate(zip(answer["categories"], frame["categories"], strict=True)):
            try:
                ids = category_ids(predicted)
            except ValueError:
                raise InvalidSubmission(f"submission.csv row {row + 1}: categories {predicted!r} are not "
                                        "category ids") from None
            scores.append(average_precision_at_k(category_ids(truth), ids))
        return float(np.mean(scores))


class FathomnetCpu(Fathomnet):
    name = f"{PACK}/fathomnet-cpu"
    description = "fathomnet scaled for a CPU: 96-pixel images in the starter; MAP@20, higher is better"
    starter_edits = {"train.py": [
        ("SIZE = 256\n", "SIZE = 96  # CPU-scaled: small images (the smallest the four 5x5 conv blocks accept)\n"),
        # Seeded: on the few images a CPU run affords, an unseeded starter's score swings by more than the
        # success margin from run to run, so the baseline would say more about luck than about the task.
        ('IMAGE_DIR = "images/"\n',
         'IMAGE_DIR = "images/"\ntorch.manual_seed(0)  # CPU-scaled: the same baseline on every run\n'
         'np.random.seed(0)\n')]}
    cpu_variant = None
    # mlab's own variant at another scale: the original's number does not apply, so its baseline is measured.
    fixed_baseline = None
    fixed_baseline_source = ""
    resources = Resources(gpu="optional", ram_gb=8.0, network_for_prepare=True, baseline_seconds=900.0,
                          extras=["vision (torch, pillow)", "kaggle (only to download)"])
    research_problem = Fathomnet.research_problem + (
        "\nThis machine has no GPU: the starter works on 96x96 images; keep each training run under an hour.")

