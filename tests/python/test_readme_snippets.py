"""The README's C++ snippets compile: every ```cpp block of README.md appears verbatim in
examples/readme_snippets.cpp (its #include lines anywhere there, its other lines as one run,
indentation aside), which the CMake build compiles with the examples.

Reads files only; needs neither torch nor a build.
"""

import os
import re

ROOT = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
SNIPPETS = "examples/readme_snippets.cpp"


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _contains_run(lines, run):
    return any(lines[i:i + len(run)] == run for i in range(len(lines) - len(run) + 1))


def test_every_readme_cpp_block_is_compiled():
    blocks = re.findall(r"^```cpp\n(.*?)^```", _read("README.md"), re.S | re.M)
    assert blocks, "README.md has no ```cpp block"
    assert SNIPPETS.split("/")[-1] in _read("examples/CMakeLists.txt"), \
        f"{SNIPPETS} is not built by examples/CMakeLists.txt"
    compiled = [line.strip() for line in _read(SNIPPETS).splitlines()]
    missing = []
    for block in blocks:
        lines = [line.strip() for line in block.splitlines()]
        includes = [line for line in lines if line.startswith("#include")]
        body = [line for line in lines if not line.startswith("#include")]
        while body and not body[0]:
            body.pop(0)
        while body and not body[-1]:
            body.pop()
        if not all(line in compiled for line in includes) or not _contains_run(compiled, body):
            missing.append(block.splitlines()[0])
    assert not missing, f"README blocks not found verbatim in {SNIPPETS}: {missing}"
