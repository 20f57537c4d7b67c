"""Getting raw data: downloads verified by checksum, the Kaggle API, or a local copy the user points at.

No step ever waits for keyboard input. Downloads go to a cache ($MLAB_HOME/downloads), or to the folder
`mlab data --download` fills, through a .part file that an interrupted download resumes (HTTP Range) and that is
renamed only after its checksum matched, so a corrupt download is never used. A local copy of a file whose
publisher gives a checksum is held to it too.
"""
from __future__ import annotations

import fcntl
import hashlib
import http.client
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from mlab.core import MlabError

MIRROR_ENV = "MLAB_MLAGENTBENCH_MIRROR"  # a base URL (or file:// folder) that serves the same file names
CACHE_ENV = "MLAB_DOWNLOAD_CACHE"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Source:
    """A file published by the original source. md5/sha256 None means the publisher gives no checksum."""

    url: str
    filename: str
    md5: str | None = None
    sha256: str | None = None
    size: int | None = None  # bytes, where known: shown by `mlab data`, never used to accept a file
    terms: str = ""  # the page whose terms govern the file


def kaggle_hint(task: str | None) -> str:
    """What to do when the Kaggle API cannot fetch a competition here (the mirror variable does not apply)."""
    which = task or "--all"
    return (f"or, on a machine with internet, `mlab data {which}` lists the files and where they go; put them in "
            f"a folder and prepare with --data-dir (or MLAB_DATA_DIR)")


def fetch_hint(task: str | None = None) -> str:
    """What to do when a file cannot be fetched here: every download failure says it."""
    which = task or "--all"
    return (f"on a machine with internet, `mlab data {which}` lists every file (URL, checksum, where it goes) and "
            f"`mlab data {which} --download DIR` fetches them; then prepare with --data-dir DIR (or "
            f"MLAB_DATA_DIR=DIR), or set {MIRROR_ENV} to a server with the same file names")


def download_cache() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if os.environ.get("MLAB_HOME"):
        return Path(os.environ["MLAB_HOME"]).expanduser() / "downloads"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache) / "mlab" / "downloads"


def file_digest(path: Path, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: Path, source: Source, local: bool = False) -> None:
    for algorithm in ("sha256", "md5"):
        expected = getattr(source, algorithm)
        if expected:
            actual = file_digest(path, algorithm)
            if actual != expected.lower():
                what = (f"the local copy {path} is not the published file (a partial download or another file)"
                        if local else "the download is corrupt or the source changed")
                raise MlabError(f"{source.filename}: {algorithm} checksum mismatch (expected {expected}, "
                                f"got {actual}): {what}")


def source_url(source: Source) -> str:
    mirror = os.environ.get(MIRROR_ENV)
    if mirror:
        return mirror.rstrip("/") + "/" + source.filename
    return source.url


def download(source: Source, log: Callable[[str], None] = print, timeout: float = 60.0,
             task: str | None = None) -> Path:
    """The verified file in the download cache, fetched when absent."""
    return fetch(source, download_cache() / source.filename, log, timeout, task)


def fetch(source: Source, final: Path, log: Callable[[str], None] = print, timeout: float = 60.0,
          task: str | None = None) -> Path:
    """source verified at final, downloaded (resuming an earlier partial download) when absent or corrupt.

    One process downloads a file at a time (a lock on the .part file); the others wait and reuse it."""
    final.parent.mkdir(parents=True, exist_ok=True)
    part = final.with_name(final.name + ".part")
    try:
        return _fetch_locked(source, final, part, log, timeout, task)
    finally:
        if part.exists() and part.stat().st_size == 0:  # nothing to resume from
            part.unlink(missing_ok=True)


def _fetch_locked(source: Source, final: Path, part: Path, log: Callable[[str], None], timeout: float,
                  task: str | None) -> Path:
    with open(part, "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_file():
            try:
                verify(final, source)
                return final
            except MlabError:
                final.unlink()
        url = source_url(source)
        try:
            _get(url, part, timeout, log)
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            raise MlabError(f"downloading {url} failed: {exc!r}; what arrived is kept and resumed next time; "
                            f"{fetch_hint(task)}") from None
        try:
            verify(part, source)
        except MlabError as exc:
            part.unlink()
            raise MlabError(f"{exc}; {fetch_hint(task)}") from None
        if not (source.md5 or source.sha256):
            log(f"{source.filename}: the source publishes no checksum; sha256 of this copy is "
                f"{file_digest(part, 'sha256')}")
        os.replace(part, final)
    return final


def _get(url: str, part: Path, timeout: float, log: Callable[[str], None]) -> None:
    """Download url into part, continuing after the bytes it already holds when the server allows it."""
    have = part.stat().st_size
    headers = {"User-Agent": "mlab-tasks-mlagentbench"}
    if have:
        headers["Range"] = f"bytes={have}-"
    log(f"downloading {url}" + (f" (resuming after {have:,} bytes)" if have else ""))
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to send: the part is whole (the checksum will tell)
            return
        raise
    with response:
        resumed = have and response.status == 206
        promised = response.headers.get("Content-Length")
        received = 0
        with open(part, "ab" if resumed else "wb") as out:
            # read1 hands over what arrived, so a dropped connection keeps every byte for the next resume
            while chunk := response.read1(_CHUNK):
                out.write(chunk)
                received += len(chunk)
        if promised is not None and received < int(promised):
            raise OSError(f"the connection closed after {received:,} of {int(promised):,} bytes")


# ---- archives -------------------------------------------------------------------------------------
def _inside(root: Path, name: str) -> bool:
    target = (root / name).resolve()
    return target == root or root in target.parents


def extract(archive: Path, dest: Path) -> Path:
    """Unpack a zip or tar archive into dest, refusing members that would land outside it."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if not _inside(root, name):
                    raise MlabError(f"{archive.name}: unsafe path in archive: {name!r}")
            zf.extractall(dest)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            for member in tf.getmembers():
                if not _inside(root, member.name) or member.issym() or member.islnk():
                    raise MlabError(f"{archive.name}: unsafe member in archive: {member.name!r}")
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:
                tf.extractall(dest)
    else:
        raise MlabError(f"{archive}: not a zip or tar archive")
    return dest


def find(root: Path, names: Iterable[str], max_depth: int = 4) -> Path | None:
    """The first file or folder under root (breadth first) whose name is one of names."""
    wanted = set(names)
    level = [root]
    for _ in range(max_depth + 1):
        following = []
        for folder in level:
            try:
                entries = sorted(folder.iterdir())
            except OSError:
                continue
            for entry in entries:
                if entry.name in wanted:
                    return entry
                if entry.is_dir() and not entry.name.startswith("__MACOSX"):
                    following.append(entry)
        level = following
    return None


def find_folder_with(root: Path, required: Iterable[str], aliases: Iterable[str] = (),
                     max_depth: int = 3, accept: Callable[[Path], bool] | None = None) -> Path | None:
    """A folder under root (root itself, an alias sub-folder, or deeper) holding every required path and, given
    accept, passing it: in a folder of several datasets another task's train.csv is not this task's."""
    required = list(required)

    def fits(folder: Path) -> bool:
        return all((folder / r).exists() for r in required) and (accept is None or accept(folder))

    candidates = [root] + [root / a for a in aliases]
    for candidate in candidates:
        if candidate.is_dir() and fits(candidate):
            return candidate
    level = [root]
    for _ in range(max_depth):
        following = []
        for folder in level:
            for entry in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
                if fits(entry):
                    return entry
                following.append(entry)
        level = following
    return None


def csv_header(path: Path) -> list[str]:
    """The first row of a CSV file (plain or .gz); [] when unreadable."""
    import csv
    import gzip

    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", newline="", encoding="utf-8", errors="replace") as f:
            return next(csv.reader(f), [])
    except (OSError, csv.Error, EOFError):
        return []


def has_columns(name: str, columns: Iterable[str]) -> Callable[[Path], bool]:
    """accept for find_folder_with: the folder's file `name` has every one of columns in its header."""
    wanted = set(columns)
    return lambda folder: wanted <= set(csv_header(folder / name))


def require_columns(path: Path, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in csv_header(path)]
    if missing:
        raise MlabError(f"{path} lacks the column(s) {', '.join(missing)}: not this task's file")


# ---- Kaggle ---------------------------------------------------------------------------------------
def kaggle_download(competition: str, dest: Path, log: Callable[[str], None] = print,
                    task: str | None = None) -> Path:
    """Download and unpack a competition's files with the Kaggle API; needs credentials and accepted rules."""
    if shutil.which("kaggle") is None and importlib_missing("kaggle"):
        raise MlabError(f"downloading the Kaggle competition {competition!r} needs the Kaggle API: "
                        "pip install 'mlab-tasks-mlagentbench[kaggle]' and put your token in ~/.kaggle/kaggle.json "
                        f"(or set KAGGLE_USERNAME and KAGGLE_KEY); {kaggle_hint(task)}")
    dest.mkdir(parents=True, exist_ok=True)
    command = ([shutil.which("kaggle")] if shutil.which("kaggle") else [sys.executable, "-m", "kaggle.cli"])
    log(f"downloading the Kaggle competition {competition}")
    proc = subprocess.run([*command, "competitions", "download", "-c", competition, "-p", str(dest)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        text = (proc.stdout + proc.stderr).strip()
        hint = ""
        if "403" in text or "rules" in text.lower():
            hint = f"; accept the rules at https://www.kaggle.com/competitions/{competition}/rules first"
        elif "401" in text or "kaggle.json" in text:
            hint = "; Kaggle credentials are missing or wrong (~/.kaggle/kaggle.json, KAGGLE_USERNAME/KAGGLE_KEY)"
        last = text.splitlines()[-1] if text else ""
        raise MlabError(f"Kaggle download of {competition!r} failed{hint}: {last}; {kaggle_hint(task)}")
    for archive in sorted(dest.glob("*.zip")):
        extract(archive, dest)
        archive.unlink()
    return dest


def importlib_missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def copy_tree(source: Path, dest: Path) -> None:
    """Copy a folder (a model checkpoint) into the prepared task, links followed, caches left out."""
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(".cache", "__pycache__", "*.lock"))


class Scratch:
    """A temporary folder for downloads and unpacking, removed afterwards (also on failure)."""

    def __init__(self, near: Path):
        self.path = Path(tempfile.mkdtemp(prefix=".mlab-raw-", dir=near))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *_exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def obtain_competition(source_dir: Path | None, competition: str, required: list[str], aliases: list[str],
                       scratch: Path, log: Callable[[str], None],
                       accept: Callable[[Path], bool] | None = None) -> Path:
    """A folder holding the competition's files: from the local copy (folder or Kaggle zip), else Kaggle."""
    if source_dir is not None:
        found = find_folder_with(source_dir, required, aliases, accept=accept)
        if found is not None:
            return found
        archive = find(source_dir, [f"{competition}.zip"])
        if archive is not None:
            extract(archive, scratch / "unpacked")
            found = find_folder_with(scratch / "unpacked", required, accept=accept)
            if found is not None:
                return found
        what = "" if accept is None else " with this competition's columns"
        raise MlabError(f"no {', '.join(required)}{what} found in {source_dir} (nor a {competition}.zip); "
                        f"see `mlab data` for the files and layout")
    kaggle_download(competition, scratch / "kaggle", log)
    found = find_folder_with(scratch / "kaggle", required, accept=accept)
    if found is None:
        raise MlabError(f"the Kaggle download of {competition!r} lacks {', '.join(required)}")
    return found


def obtain_archive(source_dir: Path | None, source: Source, scratch: Path, log: Callable[[str], None],
                   extracted_marker: str, task: str | None = None,
                   check: Callable[[Path], None] | None = None) -> Path:
    """A folder holding the unpacked archive: a local unpacked copy, a local archive, or a verified download.

    extracted_marker is a path that identifies the unpacked content (e.g. "cifar-10-batches-py"). A local archive
    is held to the published checksum like a download; an unpacked copy has none to compare, so `check` (given
    the folder holding the marker) checks its structure and raises MlabError when it is not the real thing.
    """
    if source_dir is not None:
        found = find_folder_with(source_dir, [extracted_marker])
        if found is not None:
            if check is not None:
                check(found)
            return found
        archive = find(source_dir, [source.filename])
        if archive is None:
            raise MlabError(f"neither {extracted_marker} nor {source.filename} found in {source_dir}; "
                            f"{fetch_hint(task)}")
        verify(archive, source, local=True)
    else:
        archive = download(source, log, task=task)
    extract(archive, scratch / "unpacked")
    found = find_folder_with(scratch / "unpacked", [extracted_marker])
    if found is None:
        raise MlabError(f"{archive.name} does not contain {extracted_marker}")
    if check is not None:
        check(found)
    return found
