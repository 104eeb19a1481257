"""Session settings for tests/py: the persistent compile cache (latch/cache.py) is off, so
that every test compiles from scratch and nothing is written to the user's cache folder;
tests/py/test_cache.py turns it on with a temporary LATCH_CACHE_DIR."""
import os
import tempfile

os.environ["LATCH_CACHE"] = "0"
os.environ["LATCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="latch-test-cache-")
