# Installs a built ropenorm (component ropenorm_dev) into a fresh prefix, then configures, builds
# and runs tests/package/consumer against that prefix alone, as a user's project would.
#
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=<repository> -DGENERATOR=...
#         -DCXX_COMPILER=... -DCUDA_ROOT=... -DEXPECTED_VERSION=... [-DCLI=ON]
#         -P check_install.cmake
#
# With CLI=ON (the build has the command-line program) it also installs the component
# ropenorm_cli and runs the installed `ropenorm info`.
#
# Fails when: the install misses a file; the installed package names a path in the source or
# build tree; find_package picks a package outside the prefix; the consumer does not build; or
# its host checks fail; or the installed program does not run. The built consumer stays in WORK_DIR/build for the GPU check.
foreach(_var BUILD_DIR WORK_DIR SOURCE_DIR GENERATOR CXX_COMPILER CUDA_ROOT EXPECTED_VERSION)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check_install.cmake: -D${_var}=... is required")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
run_step("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}"
         --component ropenorm_dev)

file(GLOB_RECURSE installed RELATIVE "${prefix}" "${prefix}/*")
foreach(_want include/ropenorm/version.h include/ropenorm/rms_norm.h libropenorm.a
              cmake/ropenorm/ropenormConfig.cmake cmake/ropenorm/ropenormConfigVersion.cmake
              cmake/ropenorm/ropenormTargets.cmake)
  set(_found FALSE)
  foreach(_file IN LISTS installed)
    string(FIND "${_file}" "${_want}" _at)
    if(NOT _at EQUAL -1)
      set(_found TRUE)
    endif()
  endforeach()
  if(NOT _found)
    message(FATAL_ERROR "the install has no ${_want}; it holds:\n${installed}")
  endif()
endforeach()
foreach(_file IN LISTS installed)
  if(_file MATCHES "\\.cmake$")
    file(READ "${prefix}/${_file}" _text)
    foreach(_tree "${SOURCE_DIR}" "${BUILD_DIR}")
      string(FIND "${_text}" "${_tree}" _at)
      if(NOT _at EQUAL -1)
        message(FATAL_ERROR "${_file} names ${_tree}: the installed package is not relocatable")
      endif()
    endforeach()
  endif()
endforeach()

if(CLI)
  run_step("cmake --install (ropenorm_cli)" ${CMAKE_COMMAND} --install "${BUILD_DIR}"
           --prefix "${prefix}" --component ropenorm_cli)
  run_step("the installed `ropenorm info`" "${prefix}/bin/ropenorm" info)
  message(STATUS "installed ropenorm info:\n${step_output}")
endif()

run_step("configuring the consumer" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/package/consumer"
         -B "${WORK_DIR}/build" -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release
         "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
         "-DCUDAToolkit_ROOT=${CUDA_ROOT}" "-DROPENORM_EXPECTED_VERSION=${EXPECTED_VERSION}")
file(STRINGS "${WORK_DIR}/build/CMakeCache.txt" _dir REGEX "^ropenorm_DIR:")
string(REGEX REPLACE "^ropenorm_DIR:[A-Z]+=" "" _dir "${_dir}")
string(FIND "${_dir}" "${prefix}/" _at)
if(NOT _at EQUAL 0)
  message(FATAL_ERROR "find_package(ropenorm) found '${_dir}', not the package in ${prefix}")
endif()
run_step("building the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run_step("the consumer's host checks" "${WORK_DIR}/build/consumer")
message(STATUS "installed to ${prefix}, found at ${_dir}\n${step_output}")
