# Installs a built ropenorm (component ropenorm_dev, and ropenorm_cli where the program is built)
# into a staging folder, moves it to WORK_DIR/prefix (an installed package must not depend on
# where it was installed), then configures, builds and runs tests/package/consumer against that
# prefix alone, as a user's project would; then once more against the build folder as a package.
#
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=<repository> -DGENERATOR=...
#         -DMAKE_PROGRAM=... -DCONFIG=... -DCXX_COMPILER=... -DCUDA_ROOT=...
#         -DEXPECTED_VERSION=... -DLIBDIR=... -DINCLUDEDIR=... -DBINDIR=... [-DCLI=ON]
#         -P check_install.cmake
#
# Fails when: the install misses a file or holds a header the source tree does not; an installed
# CMake file names the source tree, the build tree or the staging folder; find_package picks a
# package outside the prefix; the consumer (one translation unit per installed header, and the
# program) does not build; its host checks fail; or the installed `ropenorm --version` (which must
# print this version) or `ropenorm info` fails.
# Each of these for the build folder as a package too, where it applies.
# The consumer stays in WORK_DIR/bin for the GPU check.
foreach(_var BUILD_DIR WORK_DIR SOURCE_DIR GENERATOR MAKE_PROGRAM CONFIG CXX_COMPILER CUDA_ROOT
             EXPECTED_VERSION LIBDIR INCLUDEDIR BINDIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check_install.cmake: -D${_var}=... is required")
  endif()
endforeach()
# A DESTDIR in the environment would send the install elsewhere.
set(ENV{DESTDIR} "")

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(staging "${WORK_DIR}/staging")
set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
set(components ropenorm_dev)
if(CLI)
  list(APPEND components ropenorm_cli)
endif()
foreach(_component IN LISTS components)
  run_step("cmake --install (${_component})" ${CMAKE_COMMAND} --install "${BUILD_DIR}"
           --config "${CONFIG}" --prefix "${staging}" --component ${_component})
endforeach()
file(RENAME "${staging}" "${prefix}")

set(cmake_dir "${prefix}/${LIBDIR}/cmake/ropenorm")
foreach(_file "${prefix}/${LIBDIR}/libropenorm.a" "${cmake_dir}/ropenormConfig.cmake"
              "${cmake_dir}/ropenormConfigVersion.cmake" "${cmake_dir}/ropenormTargets.cmake")
  if(NOT EXISTS "${_file}")
    message(FATAL_ERROR "the install has no ${_file}")
  endif()
endforeach()
file(GLOB source_headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/ropenorm/*.h")
file(GLOB_RECURSE installed_headers RELATIVE "${prefix}/${INCLUDEDIR}"
     "${prefix}/${INCLUDEDIR}/*")
list(SORT source_headers)
list(SORT installed_headers)
if(NOT source_headers STREQUAL installed_headers)
  message(FATAL_ERROR "installed headers:\n  ${installed_headers}\nthe source tree's public "
                      "headers:\n  ${source_headers}")
endif()
file(GLOB cmake_files "${cmake_dir}/*.cmake")
foreach(_file IN LISTS cmake_files)
  file(READ "${_file}" _text)
  foreach(_tree "${SOURCE_DIR}" "${BUILD_DIR}" "${staging}")
    string(FIND "${_text}" "${_tree}" _at)
    if(NOT _at EQUAL -1)
      message(FATAL_ERROR "${_file} names ${_tree}: the installed package is not relocatable")
    endif()
  endforeach()
endforeach()

if(CLI)
  run_step("the installed `ropenorm --version`" "${prefix}/${BINDIR}/ropenorm" --version)
  if(NOT step_output STREQUAL "ropenorm ${EXPECTED_VERSION}\n")
    message(FATAL_ERROR "the installed `ropenorm --version` printed '${step_output}'")
  endif()
  run_step("the installed `ropenorm info`" "${prefix}/${BINDIR}/ropenorm" info)
  message(STATUS "installed ropenorm info:\n${step_output}")
  # Checked; not kept (the program is most of the install's size).
  file(REMOVE_RECURSE "${prefix}/${BINDIR}")
endif()

# The consumer against a package folder: configured, checked to have found exactly that folder,
# built into its own bin folder and run.
function(build_consumer what package_prefix expected_dir build_dir bin_dir)
  run_step("configuring the consumer (${what})" ${CMAKE_COMMAND} --fresh
           -S "${SOURCE_DIR}/tests/package/consumer" -B "${build_dir}" -G "${GENERATOR}"
           "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
           "-DCMAKE_PREFIX_PATH=${package_prefix}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
           "-DCUDAToolkit_ROOT=${CUDA_ROOT}" "-DROPENORM_EXPECTED_VERSION=${EXPECTED_VERSION}"
           "-DCONSUMER_BIN_DIR=${bin_dir}")
  file(STRINGS "${build_dir}/CMakeCache.txt" _dir REGEX "^ropenorm_DIR:")
  string(REGEX REPLACE "^ropenorm_DIR:[A-Z]+=" "" _dir "${_dir}")
  if(NOT _dir STREQUAL expected_dir)
    message(FATAL_ERROR "${what}: find_package(ropenorm) found '${_dir}', not ${expected_dir}")
  endif()
  run_step("building the consumer (${what})" ${CMAKE_COMMAND} --build "${build_dir}"
           --config "${CONFIG}")
  run_step("the consumer's host checks (${what})" "${bin_dir}/consumer")
  message(STATUS "${what}: found ${_dir}\n${step_output}")
endfunction()

build_consumer("installed, moved" "${prefix}" "${cmake_dir}" "${WORK_DIR}/build" "${WORK_DIR}/bin")
# The build folder is a package too (export() in the top-level CMakeLists.txt).
build_consumer("build folder" "${BUILD_DIR}" "${BUILD_DIR}" "${WORK_DIR}/build-tree"
               "${WORK_DIR}/bin-build-tree")
