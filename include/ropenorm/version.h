/// @file
/// ropenorm's version: the one place it is written. CMake's project version and the installed
/// package's ropenormConfigVersion.cmake are read from here; the Python package's version
/// (pyproject.toml, python/ropenorm/__init__.py) is checked against it by the tests.
#pragma once

/// Major version (each of the three lines is read by CMake: "#define NAME n" exactly).
#define ROPENORM_VERSION_MAJOR 0
/// Minor version; while the major version is 0, a new minor version may change the API.
#define ROPENORM_VERSION_MINOR 1
/// Patch version.
#define ROPENORM_VERSION_PATCH 0

/// MAJOR * 10000 + MINOR * 100 + PATCH, for compile-time comparisons.
#define ROPENORM_VERSION \
  (ROPENORM_VERSION_MAJOR * 10000 + ROPENORM_VERSION_MINOR * 100 + ROPENORM_VERSION_PATCH)

namespace ropenorm {

/// The version of the library that was linked, "MAJOR.MINOR.PATCH" (the headers' version is
/// ROPENORM_VERSION_*; the two differ only when headers and library come from different builds).
const char* version();

}  // namespace ropenorm
