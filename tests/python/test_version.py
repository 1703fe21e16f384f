"""One version everywhere: include/ropenorm/version.h (which CMake and the installed C++ package
read), pyproject.toml (the wheel) and python/ropenorm/__init__.py (``ropenorm.__version__``).

Reads the repository's files as text, so it checks the source tree even where an installed
ropenorm would be imported instead; needs neither torch nor a build.
"""

import re


def _header_version(text):
    parts = [re.findall(rf"^#define ROPENORM_VERSION_{p} (0|[1-9]\d*)\r?$", text, re.M)
             for p in ("MAJOR", "MINOR", "PATCH")]
    assert all(len(found) == 1 for found in parts), \
        "version.h must define each of ROPENORM_VERSION_MAJOR, _MINOR and _PATCH once"
    return ".".join(found[0] for found in parts)


def test_python_and_wheel_versions_match_the_header(repo_file):
    header = _header_version(repo_file("include/ropenorm/version.h"))
    wheel = re.search(r'^version = "([^"]+)"$', repo_file("pyproject.toml"), re.M)
    package = re.search(r'^__version__ = "([^"]+)"$', repo_file("python/ropenorm/__init__.py"),
                        re.M)
    assert wheel and package, "pyproject.toml and python/ropenorm/__init__.py must state a version"
    assert (wheel.group(1), package.group(1)) == (header, header)
