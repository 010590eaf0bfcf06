import os
import tempfile

import numpy as np
import pytest

# --kernel auto calibrates once per machine and caches the choice: keep the tests' cache
# out of the user's home, shared by the whole session (subprocesses inherit it)
os.environ.setdefault("GEMVBW_CACHE_DIR", tempfile.mkdtemp(prefix="gemvbw-test-cache-"))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
