"""The README's C++ snippets compile: the n-th C++ block of README.md is, line for line
(indentation aside), in the n-th `// clang-format off` ... `// clang-format on` region of
examples/readme_snippets.cpp (its #include lines at the top of that file), which the CMake build
compiles with the examples (examples/CMakeLists.txt, added by the top-level CMakeLists.txt).

Reads files only; needs neither torch nor a build.
"""

import os
import re

ROOT = os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir))
SNIPPETS = "examples/readme_snippets.cpp"
FENCE = re.compile(r"^\s*```\s*(c\+\+|cpp|cc|cxx)\s*$", re.I)


def _read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _cmake_code(path):
    """The lines of a CMake file that are not comments."""
    return [line.split("#")[0].strip() for line in _read(path).splitlines()]


def _readme_blocks():
    blocks, current = [], None
    for line in _read("README.md").splitlines():
        if current is None:
            if FENCE.match(line):
                current = []
        elif line.strip() == "```":
            blocks.append(current)
            current = None
        else:
            current.append(line.strip())
    return blocks


def _regions(lines):
    regions, current = [], None
    for line in lines:
        if line == "// clang-format off":
            current = []
        elif line == "// clang-format on":
            regions.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return regions


def _contains_run(lines, run):
    return any(lines[i:i + len(run)] == run for i in range(len(lines) - len(run) + 1))


def test_every_readme_cpp_block_is_compiled():
    assert "add_subdirectory(examples)" in _cmake_code("CMakeLists.txt")
    assert any(line.startswith("add_library(ropenorm_readme_snippets OBJECT readme_snippets.cpp")
               for line in _cmake_code("examples/CMakeLists.txt")), \
        f"{SNIPPETS} is not built by examples/CMakeLists.txt"
    text = _read(SNIPPETS)
    assert not re.search(r"^\s*#\s*if|/\*(?![^\n]*\*/)", text, re.M), \
        f"{SNIPPETS} must not hide code from the compiler (#if, a /* comment over several lines)"
    compiled = [line.strip() for line in text.splitlines()]
    regions = _regions(compiled)
    blocks = _readme_blocks()
    assert blocks, "README.md has no C++ block"
    assert len(blocks) == len(regions), \
        f"README.md has {len(blocks)} C++ blocks, {SNIPPETS} {len(regions)} regions"
    missing = []
    for block, region in zip(blocks, regions):
        includes = [line for line in block if line.startswith("#include")]
        body = [line for line in block if not line.startswith("#include")]
        while body and not body[0]:
            body.pop(0)
        while body and not body[-1]:
            body.pop()
        if not all(line in compiled for line in includes) or not _contains_run(region, body):
            missing.append(block[0])
    assert not missing, f"README blocks not found, in order, in {SNIPPETS}: {missing}"
