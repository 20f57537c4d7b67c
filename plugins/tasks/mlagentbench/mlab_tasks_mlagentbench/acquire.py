"""Getting raw data: downloads verified by checksum, the Kaggle API, or a local copy the user points at.

No step ever waits for keyboard input. Downloads go to a cache ($MLAB_HOME/downloads) through a .part file
that is renamed only after its checksum matched, so an interrupted or corrupt download is never reused.
"""
from __future__ import annotations

import hashlib
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


def verify(path: Path, source: Source) -> None:
    for algorithm in ("sha256", "md5"):
        expected = getattr(source, algorithm)
        if expected:
            actual = file_digest(path, algorithm)
            if actual != expected.lower():
                raise MlabError(f"{source.filename}: {algorithm} checksum mismatch (expected {expected}, "
                                f"got {actual}); the download is corrupt or the source changed")


def source_url(source: Source) -> str:
    mirror = os.environ.get(MIRROR_ENV)
    if mirror:
        return mirror.rstrip("/") + "/" + source.filename
    return source.url


def download(source: Source, log: Callable[[str], None] = print, timeout: float = 60.0) -> Path:
    """The verified file in the download cache, fetched when absent."""
    cache = download_cache()
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / source.filename
    if final.is_file():
        try:
            verify(final, source)
            return final
        except MlabError:
            final.unlink()
    url = source_url(source)
    part = cache / f".{source.filename}.{os.getpid()}.part"
    log(f"downloading {url}")
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "mlab-tasks-mlagentbench"})
        with urllib.request.urlopen(request, timeout=timeout) as response, open(part, "wb") as out:
            shutil.copyfileobj(response, out, _CHUNK)
        verify(part, source)
        if not (source.md5 or source.sha256):
            log(f"{source.filename}: the source publishes no checksum; sha256 of this copy is "
                f"{file_digest(part, 'sha256')}")
        os.replace(part, final)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise MlabError(f"downloading {url} failed: {exc}") from None
    finally:
        if part.exists():
            part.unlink()
    return final


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
                     max_depth: int = 3) -> Path | None:
    """A folder under root (root itself, an alias sub-folder, or deeper) holding every required path."""
    required = list(required)
    candidates = [root] + [root / a for a in aliases]
    for candidate in candidates:
        if candidate.is_dir() and all((candidate / r).exists() for r in required):
            return candidate
    level = [root]
    for _ in range(max_depth):
        following = []
        for folder in level:
            for entry in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
                if all((entry / r).exists() for r in required):
                    return entry
                following.append(entry)
        level = following
    return None


# ---- Kaggle ---------------------------------------------------------------------------------------
def kaggle_download(competition: str, dest: Path, log: Callable[[str], None] = print) -> Path:
    """Download and unpack a competition's files with the Kaggle API; needs credentials and accepted rules."""
    if shutil.which("kaggle") is None and importlib_missing("kaggle"):
        raise MlabError(f"downloading the Kaggle competition {competition!r} needs the Kaggle API: "
                        "pip install 'mlab-tasks-mlagentbench[kaggle]' and put your token in ~/.kaggle/kaggle.json "
                        "(or set KAGGLE_USERNAME and KAGGLE_KEY); or prepare from a local copy with --data-dir")
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
        raise MlabError(f"Kaggle download of {competition!r} failed{hint}: {text.splitlines()[-1] if text else ''}")
    for archive in sorted(dest.glob("*.zip")):
        extract(archive, dest)
        archive.unlink()
    return dest


def importlib_missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


class Scratch:
    """A temporary folder for downloads and unpacking, removed afterwards (also on failure)."""

    def __init__(self, near: Path):
        self.path = Path(tempfile.mkdtemp(prefix=".mlab-raw-", dir=near))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *_exc) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def obtain_competition(source_dir: Path | None, competition: str, required: list[str], aliases: list[str],
                       scratch: Path, log: Callable[[str], None]) -> Path:
    """A folder holding the competition's files: from the local copy (folder or Kaggle zip), else Kaggle."""
    if source_dir is not None:
        found = find_folder_with(source_dir, required, aliases)
        if found is not None:
            return found
        archive = find(source_dir, [f"{competition}.zip"])
        if archive is not None:
            extract(archive, scratch / "unpacked")
            found = find_folder_with(scratch / "unpacked", required)
            if found is not None:
                return found
        raise MlabError(f"no {', '.join(required)} found in {source_dir} (nor a {competition}.zip)")
    kaggle_download(competition, scratch / "kaggle", log)
    found = find_folder_with(scratch / "kaggle", required)
    if found is None:
        raise MlabError(f"the Kaggle download of {competition!r} lacks {', '.join(required)}")
    return found


def obtain_archive(source_dir: Path | None, source: Source, scratch: Path, log: Callable[[str], None],
                   extracted_marker: str) -> Path:
    """A folder holding the unpacked archive: a local unpacked copy, a local archive, or a verified download.

    extracted_marker is a path that identifies the unpacked content (e.g. "cifar-10-batches-py").
    Local copies are trusted as given; checksums apply to downloads.
    """
    if source_dir is not None:
        found = find_folder_with(source_dir, [extracted_marker])
        if found is not None:
            return found
        archive = find(source_dir, [source.filename])
        if archive is None:
            raise MlabError(f"neither {extracted_marker} nor {source.filename} found in {source_dir}")
    else:
        archive = download(source, log)
    extract(archive, scratch / "unpacked")
    found = find_folder_with(scratch / "unpacked", [extracted_marker])
    if found is None:
        raise MlabError(f"{archive.name} does not contain {extracted_marker}")
    return found
