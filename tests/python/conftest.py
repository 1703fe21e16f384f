"""Makes the source tree's python/ropenorm importable when the package is not installed, and
gives the tests that read the repository's own files (fixture ``repo_file``) their text.

An installed ropenorm (pip install . --no-build-isolation) carries the compiled extension and is
preferred. The source tree has the extension where scripts/build compiled it (python3 importing a
CUDA build of torch); without it, tests that need it skip with the loader's reason.
"""

import importlib.util
import os
import sys

import pytest

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                     os.pardir))

if importlib.util.find_spec("ropenorm") is None:
    sys.path.insert(0, os.path.join(REPO, "python"))


@pytest.fixture
def repo_file():
    """A function from a path relative to the repository's root to that file's text."""

    def read(path):
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            return f.read()

    return read
