"""Whether bwrap works here is probed once a process by running it: a probe that fails once (a mount coming or
going while it binds the host's root) is tried again, and one that always fails says why."""
from __future__ import annotations

import os


def test_a_probe_that_fails_once_is_tried_again_and_one_that_always_fails_says_why(tmp_path, monkeypatch):
    from mlab_sandbox_bwrap import sandbox as module

    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    tries = tmp_path / "tries"
    # fails (as a mount race made the real one fail) until its third call
    fake.write_text(f'#!/bin/sh\necho x >> {tries}\n[ "$(wc -l < {tries})" -ge 3 ] && exit 0\n'
                    'echo "bwrap: Failed to mount: Invalid argument" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    module._probe.cache_clear()
    try:
        assert module._probe() == (True, "")
        assert tries.read_text().count("x") == 3
        tries.write_text("")
        monkeypatch.setattr(module, "_PROBE_TRIES", 2)  # never reaches its third call
        module._probe.cache_clear()
        assert module._probe() == (False, "bwrap cannot create namespaces here: bwrap: Failed to mount: Invalid "
                                          "argument")
    finally:
        module._probe.cache_clear()
