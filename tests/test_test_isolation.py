"""The suite's own isolation (tests/conftest.py): no fixture, of any scope, sees the user's MLAB_HOME."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def home_seen_by_a_module_fixture() -> str:
    return os.environ.get("MLAB_HOME", "")


def test_a_module_fixture_sees_a_home_of_the_session_not_the_users(home_seen_by_a_module_fixture, tmp_path_factory):
    # test_viewer's module fixture ran a run, and so prepared its task, in the user's MLAB_HOME before the
    # per-test isolation applied
    base = tmp_path_factory.getbasetemp()
    assert Path(home_seen_by_a_module_fixture).is_relative_to(base)
    assert Path(os.environ["MLAB_HOME"]).is_relative_to(base)
    assert os.environ["MLAB_HOME"] != home_seen_by_a_module_fixture  # each test has a home of its own
