# check.cmake — installs lockon into a scratch prefix, builds tests/consumer
# against it with find_package(lockon) and again by hand with pkg-config
# (lockon.pc), runs both, and checks the exported target file is clean.
#
#   cmake -DLOCKON_SOURCE_DIR=... -DLOCKON_BINARY_DIR=... -DWORK_DIR=...
#         [-DBUILD_TYPE=Debug] -P check.cmake
#
# Any failing step stops with FATAL_ERROR and that step's full output.
cmake_minimum_required(VERSION 3.25)

foreach(required LOCKON_SOURCE_DIR LOCKON_BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${required} OR "${${required}}" STREQUAL "")
    message(FATAL_ERROR "check.cmake: -D${required}=... is required")
  endif()
endforeach()

if(NOT EXISTS "${LOCKON_BINARY_DIR}/CMakeCache.txt")
  message(FATAL_ERROR "check.cmake: ${LOCKON_BINARY_DIR} is not a configured lockon build tree")
endif()

# Build the consumer the way lockon itself was built: same compiler and
# generator, and (for a sanitizer build) the sanitizer runtime, without which
# an instrumented static liblockon.a cannot link.
load_cache("${LOCKON_BINARY_DIR}" READ_WITH_PREFIX LOCKON_BUILD_
  CMAKE_CXX_COMPILER CMAKE_GENERATOR CMAKE_MAKE_PROGRAM LOCKON_SANITIZE)

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_step name)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors
    TIMEOUT 300)
  if(NOT result EQUAL 0)
    string(REPLACE ";" " " command_line "${ARGN}")
    message(FATAL_ERROR "consumer check: ${name} failed (${result})\n"
      "command: ${command_line}\n--- stdout ---\n${output}\n--- stderr ---\n${errors}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

set(config_args)
if(NOT "${BUILD_TYPE}" STREQUAL "")
  set(config_args --config "${BUILD_TYPE}")
endif()

run_step("install" "${CMAKE_COMMAND}" --install "${LOCKON_BINARY_DIR}" --prefix "${prefix}" ${config_args})

set(configure_args
  -S "${LOCKON_SOURCE_DIR}/tests/consumer" -B "${consumer_build}"
  "-DCMAKE_PREFIX_PATH=${prefix}")
if(NOT "${BUILD_TYPE}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
if(LOCKON_BUILD_CMAKE_GENERATOR)
  list(APPEND configure_args -G "${LOCKON_BUILD_CMAKE_GENERATOR}")
endif()
if(LOCKON_BUILD_CMAKE_MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${LOCKON_BUILD_CMAKE_MAKE_PROGRAM}")
endif()
if(LOCKON_BUILD_CMAKE_CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${LOCKON_BUILD_CMAKE_CXX_COMPILER}")
endif()
if(LOCKON_BUILD_LOCKON_SANITIZE)
  list(APPEND configure_args "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
endif()
run_step("configure" "${CMAKE_COMMAND}" ${configure_args})
run_step("build" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args} --parallel 2)

# Single-config generators put the program at the top of the build tree,
# multi-config ones in a per-configuration folder.
set(consumer "${consumer_build}/consumer")
if(NOT EXISTS "${consumer}" AND NOT "${BUILD_TYPE}" STREQUAL "")
  set(consumer "${consumer_build}/${BUILD_TYPE}/consumer")
endif()
run_step("run" "${consumer}")
set(sync_output "${step_output}")

# The async component: built by the consumer project when lockon has it.
load_cache("${LOCKON_BINARY_DIR}" READ_WITH_PREFIX LOCKON_BUILD_ LOCKON_ASIO_INCLUDE_DIR)
set(async_consumer "${consumer_build}/async_consumer")
if(NOT EXISTS "${async_consumer}" AND NOT "${BUILD_TYPE}" STREQUAL "")
  set(async_consumer "${consumer_build}/${BUILD_TYPE}/async_consumer")
endif()
if(LOCKON_BUILD_LOCKON_ASIO_INCLUDE_DIR)
  if(NOT EXISTS "${async_consumer}")
    message(FATAL_ERROR "consumer check: lockon was built with the async component, but "
      "find_package(lockon COMPONENTS async) did not give the consumer lockon::async")
  endif()
  run_step("run async" "${async_consumer}")
  string(APPEND sync_output "${step_output}")
endif()
set(cmake_consumer_output "${sync_output}")

# The exported target is clean: the include directory once, no empty
# $<LINK_ONLY:> left by build-only dependencies.
file(GLOB_RECURSE targets_file "${prefix}/*/lockon-targets.cmake")
file(READ "${targets_file}" targets)
if(targets MATCHES "LINK_ONLY:>")
  message(FATAL_ERROR "consumer check: ${targets_file} has an empty $<LINK_ONLY:>")
endif()
string(REGEX MATCH "INTERFACE_INCLUDE_DIRECTORIES \"[^\"]*\"" includes "${targets}")
if(NOT includes STREQUAL "INTERFACE_INCLUDE_DIRECTORIES \"\${_IMPORT_PREFIX}/include\"")
  message(FATAL_ERROR "consumer check: include directories should be listed once: ${includes}")
endif()

# The same programs built by a pkg-config user: the compiler driven by hand
# with `pkg-config --cflags --libs lockon` (no --static: a static liblockon.a
# must link from Libs alone) from the installed lockon.pc, once with the
# consumer's own -std=c++23 first (the .pc sets no -std to override it).
file(GLOB_RECURSE pc_file "${prefix}/*/pkgconfig/lockon.pc")
if(NOT pc_file)
  message(FATAL_ERROR "consumer check: no lockon.pc installed under ${prefix}")
endif()
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
find_program(PKG_CONFIG_EXECUTABLE pkg-config REQUIRED)
function(pc_flags out module)
  run_step("pkg-config ${module}" "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${pc_dir}"
    "${PKG_CONFIG_EXECUTABLE}" --cflags --libs ${module})
  string(STRIP "${step_output}" flags)
  if(flags MATCHES "-std=")
    message(FATAL_ERROR "consumer check: pkg-config ${module} sets a C++ standard: ${flags}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()
pc_flags(pc_sync lockon)
set(sanitizer_flags)
if(LOCKON_BUILD_LOCKON_SANITIZE)
  set(sanitizer_flags -fsanitize=address,undefined)
endif()
set(cxx "${LOCKON_BUILD_CMAKE_CXX_COMPILER}")
if(NOT cxx)
  set(cxx c++)
endif()
run_step("pkg-config build" "${cxx}" -std=c++20 "${LOCKON_SOURCE_DIR}/tests/consumer/main.cpp" ${pc_sync}
  ${sanitizer_flags} -o "${WORK_DIR}/consumer-pkg-config")
run_step("pkg-config run" "${WORK_DIR}/consumer-pkg-config")
set(pc_output "${step_output}")
run_step("pkg-config build, -std=c++23" "${cxx}" -std=c++23 -DLOCKON_CONSUMER_EXPECT_CXX23
  "${LOCKON_SOURCE_DIR}/tests/consumer/main.cpp" ${pc_sync} ${sanitizer_flags} -o "${WORK_DIR}/consumer-pkg-config-23")
run_step("pkg-config run, -std=c++23" "${WORK_DIR}/consumer-pkg-config-23")
if(LOCKON_BUILD_LOCKON_ASIO_INCLUDE_DIR)
  if(NOT EXISTS "${pc_dir}/lockon-async.pc")
    message(FATAL_ERROR "consumer check: lockon was built with the async component, but no lockon-async.pc was installed")
  endif()
  pc_flags(pc_async lockon-async)
  run_step("pkg-config build, async" "${cxx}" -std=c++20 "${LOCKON_SOURCE_DIR}/tests/consumer/async_main.cpp"
    ${pc_async} ${sanitizer_flags} -o "${WORK_DIR}/async-consumer-pkg-config")
  run_step("pkg-config run, async" "${WORK_DIR}/async-consumer-pkg-config")
  string(APPEND pc_output "${step_output}")
endif()

# clang (when installed, and not for a sanitizer build, whose runtime is
# GCC's): the async consumer through find_package, which must bring Asio's
# coroutine switches with it (issue 35 §14), and the braced command
# arguments of async_main.cpp.
find_program(LOCKON_CLANG NAMES clang++-16 clang++)
if(LOCKON_BUILD_LOCKON_ASIO_INCLUDE_DIR AND LOCKON_CLANG AND NOT LOCKON_BUILD_LOCKON_SANITIZE)
  set(clang_build "${WORK_DIR}/build-clang")
  set(clang_args -S "${LOCKON_SOURCE_DIR}/tests/consumer" -B "${clang_build}" "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DCMAKE_CXX_COMPILER=${LOCKON_CLANG}")
  if(LOCKON_BUILD_CMAKE_GENERATOR)
    list(APPEND clang_args -G "${LOCKON_BUILD_CMAKE_GENERATOR}")
  endif()
  run_step("configure with clang" "${CMAKE_COMMAND}" ${clang_args})
  run_step("build with clang" "${CMAKE_COMMAND}" --build "${clang_build}" --target async_consumer --parallel 2)
  run_step("run clang build" "${clang_build}/async_consumer")
  string(APPEND pc_output " clang: ${step_output}")
endif()
message(STATUS "consumer check passed: cmake: ${cmake_consumer_output} pkg-config: ${pc_output}")
