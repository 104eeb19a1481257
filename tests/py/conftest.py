"""Session settings for tests/py: the persistent compile cache (latch/cache.py) is off, so
that every test compiles from scratch and nothing is written to the user's cache folder;
the cache tests turn it on with a temporary LATCH_CACHE_DIR (the ``cache_dir`` fixture)."""
import os
import tempfile

import pytest

os.environ["LATCH_CACHE"] = "0"
os.environ["LATCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="latch-test-cache-")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The compile cache on, in a fresh folder (returned), for one test."""
    monkeypatch.setenv("LATCH_CACHE", "1")
    monkeypatch.setenv("LATCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LATCH_DUMP_DIR", raising=False)
    return tmp_path / "cache"
