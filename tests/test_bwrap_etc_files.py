"""bwrap copies the few files of /etc a command sees into its root instead of binding each (issue 42 item 4): bwrap
reads the whole mount table after every bind, which was half of its CPU a command, and a loaded machine pays it
several times over. The copies are read afresh for each command, read-only as the binds were, and a file that
cannot be read is bound as before."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from mlab.core import ExecSpec
from mlab.core.sandbox.rootfs import ETC_ENTRIES
from tests.fixtures.sandboxes import make_sandbox

SEEN = r'''
import json, os, sys
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
files = {}
for name in sys.argv[1:]:
    path = os.path.join("/etc", name)
    if os.path.isfile(path):
        try:
            open(path, "a").close()
            writable = True
        except OSError:
            writable = False
        files[name] = {"text": open(path, errors="replace").read(), "writable": writable,
                       "mode": oct(os.stat(path).st_mode & 0o777)}
print(json.dumps({"mounts": mounts, "files": files}))
'''


def seen(tmp_path: Path, names: list[str]) -> dict:
    sandbox = make_sandbox("bwrap")
    try:
        result = sandbox.run([sys.executable, "-c", SEEN, *names], ExecSpec(cwd=tmp_path))
    finally:
        sandbox.close()
    assert result.exit_code == 0, result.output
    found: dict = json.loads(result.output)
    return found


def host_files() -> list[str]:
    return [name for name in ETC_ENTRIES if os.path.isfile(os.path.join("/etc", name))]


def test_the_etc_files_are_copies_in_the_root_read_only_and_the_same_as_the_hosts(tmp_path):
    names = host_files()
    if not names:
        pytest.skip("no file of ETC_ENTRIES in this machine's /etc")
    found = seen(tmp_path, names)
    assert not [m for m in found["mounts"] if m.startswith("/etc/") and m[5:] in names], found["mounts"]
    assert sorted(found["files"]) == sorted(names)
    for name, file in found["files"].items():
        host = os.path.join("/etc", name)
        assert file["text"] == Path(host).read_text(errors="replace"), name
        assert not file["writable"], name
        assert file["mode"] == oct(os.stat(host).st_mode & 0o777), name


def test_a_file_changed_on_the_host_is_seen_by_the_next_command(tmp_path, monkeypatch):
    from mlab_sandbox_bwrap import sandbox as module

    source = tmp_path / "conf"
    source.write_text("first\n")
    real = module.root_view

    def with_a_file_of_ours(*args, **kwargs):
        view = real(*args, **kwargs)
        view.read_only.append((str(source), "/etc/mlab-test.conf"))
        return view

    monkeypatch.setattr(module, "root_view", with_a_file_of_ours)
    sandbox = make_sandbox("bwrap")
    read = [sys.executable, "-c", "print(open('/etc/mlab-test.conf').read(), end='')"]
    work = tmp_path / "work"
    work.mkdir()
    try:
        first = sandbox.run(read, ExecSpec(cwd=work))
        source.write_text("second\n")  # in place: the same file, new content
        second = sandbox.run(read, ExecSpec(cwd=work))
        source.unlink()
        source.mkdir()  # no longer a file: bound as before
        third = sandbox.run([sys.executable, "-c", "import os; print(os.path.isdir('/etc/mlab-test.conf'))"],
                            ExecSpec(cwd=work))
    finally:
        sandbox.close()
    assert (first.output, second.output, third.output) == ("first\n", "second\n", "True\n")


def test_a_bwrap_without_perms_binds_them_as_before(tmp_path, monkeypatch):
    from mlab_sandbox_bwrap import sandbox as module

    names = host_files()
    if not names:
        pytest.skip("no file of ETC_ENTRIES in this machine's /etc")
    monkeypatch.setattr(module, "_copies_supported", lambda: False)  # bubblewrap before 0.5
    found = seen(tmp_path, names)
    assert sorted(m[5:] for m in found["mounts"] if m.startswith("/etc/") and m[5:] in names) == sorted(names)
    assert not any(file["writable"] for file in found["files"].values())


def test_whether_bwrap_can_copy_is_learnt_with_its_probe():
    """A bench's zygote probes the sandbox once before forking its hosts: they inherit this answer too, and no host
    runs `bwrap --help` of its own."""
    from mlab_sandbox_bwrap import sandbox as module

    make_sandbox("bwrap")  # skips where bwrap is not usable
    module._copies_supported.cache_clear()
    assert module.BwrapSandbox.available()[0]
    assert module._copies_supported.cache_info().currsize == 1

