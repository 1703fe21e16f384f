"""The README's C++ snippets compile: the n-th C++ block of README.md is, line for line
(indentation aside), in the n-th `// clang-format off` ... `// clang-format on` region of
examples/readme_snippets.cpp (its #include lines at the top of that file), which the CMake build
compiles with the examples (examples/CMakeLists.txt, added by the top-level CMakeLists.txt).

Reads files only; needs neither torch nor a build.
"""

import re

SNIPPETS = "examples/readme_snippets.cpp"
FENCE = re.compile(r"^```\s*(c\+\+|cpp|cc|cxx)\s*$", re.I)


def _cmake_code(text):
    """The lines of a CMake file that are not comments."""
    return [line.split("#")[0].strip() for line in text.splitlines()]


def _between(lines, opens, closes):
    """The runs of lines after each line `opens` accepts, up to the next one `closes` accepts."""
    runs, current = [], None
    for line in lines:
        if current is None:
            if opens(line):
                current = []
        elif closes(line):
            runs.append(current)
            current = None
        else:
            current.append(line)
    return runs


def _contains_run(lines, run):
    return any(lines[i:i + len(run)] == run for i in range(len(lines) - len(run) + 1))


def test_every_readme_cpp_block_is_compiled(repo_file):
    assert "add_subdirectory(examples)" in _cmake_code(repo_file("CMakeLists.txt"))
    assert any(line.startswith("add_library(ropenorm_readme_snippets OBJECT readme_snippets.cpp")
               for line in _cmake_code(repo_file("examples/CMakeLists.txt"))), \
        f"{SNIPPETS} is not built by examples/CMakeLists.txt"
    text = repo_file(SNIPPETS)
    assert not re.search(r"^\s*#\s*if|/\*(?![^\n]*\*/)", text, re.M), \
        f"{SNIPPETS} must not hide code from the compiler (#if, a /* comment over several lines)"
    compiled = [line.strip() for line in text.splitlines()]
    regions = _between(compiled, lambda line: line == "// clang-format off",
                       lambda line: line == "// clang-format on")
    blocks = _between([line.strip() for line in repo_file("README.md").splitlines()],
                      FENCE.match, lambda line: line == "```")
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
