"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The conformance mixins' asserts explain themselves as a test's do.
pytest.register_assert_rewrite("fedrec_lab.testing")

#: The toy method's package runs its own tests where it is installed
#: (tests/apps/test_out_of_tree_method.py), not in this suite.
collect_ignore = ["toy_method"]


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """``$FEDREC_DATA_DIR``: the folder holding the real dataset files (``ml-100k/u.data``...).

    Unset: the test is skipped, except under ``CI=true`` where it fails, because real-data
    tests must run in CI.
    """
    value = os.environ.get("FEDREC_DATA_DIR", "").strip()
    if not value:
        message = "FEDREC_DATA_DIR is not set: real-data tests need the raw dataset files"
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{message} (CI=true: set it, real-data tests must not be skipped in CI)")
        pytest.skip(message)
    folder = Path(value).expanduser()
    if not folder.is_dir():
        pytest.fail(f"FEDREC_DATA_DIR={value} is not a directory")
    return folder


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache folder of the test's own (downloads, prepared splits); modules that run
    federations use it for every test: ``pytestmark = pytest.mark.usefixtures(...)``."""
    monkeypatch.setenv("FEDREC_CACHE_DIR", str(tmp_path / "cache"))
