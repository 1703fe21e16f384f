"""Makes the source tree's python/ropenorm importable when the package is not installed.

An installed ropenorm (pip install . --no-build-isolation) carries the compiled extension and is
preferred. The source tree has the extension where scripts/build compiled it (python3 importing a
CUDA build of torch); without it, tests that need it skip with the loader's reason.
"""

import importlib.util
import os
import sys

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "python")

if importlib.util.find_spec("ropenorm") is None:
    sys.path.insert(0, os.path.normpath(_SRC))
