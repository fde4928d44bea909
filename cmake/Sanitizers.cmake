# Sanitizer and fuzzer build settings (see README "Sanitizers and fuzzers").
#
# RELAXPS_SANITIZER: instruments every target of the tree. Reports abort the
# process (no recovery), and tests get the runtime options from
# RELAXPS_TEST_ENVIRONMENT: reports go to <build>/sanitizer-logs/ (one file
# per reporting process, so processes started by tests are covered too) and
# TSan reads tests/sanitizers/tsan.supp.
# RELAXPS_TEST_TIMEOUT_SCALE: multiplies every test's CTest timeout (and is
# passed to tests as RELAXPS_TEST_TIME_SCALE for their own waits).
# RELAXPS_FUZZ: builds the libFuzzer binaries of tests/fuzz (clang only).
set(RELAXPS_TEST_ENVIRONMENT "")
set(_relaxps_time_scale 1)
if(RELAXPS_SANITIZER)
  if(RELAXPS_SANITIZER MATCHES "thread" AND RELAXPS_SANITIZER MATCHES "address")
    message(FATAL_ERROR "RELAXPS_SANITIZER: thread cannot be combined with address")
  endif()
  add_compile_options(-fsanitize=${RELAXPS_SANITIZER} -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${RELAXPS_SANITIZER})
  set(_logs ${CMAKE_BINARY_DIR}/sanitizer-logs)
  set(_common "log_path=${_logs}/report:print_stacktrace=1")
  list(APPEND RELAXPS_TEST_ENVIRONMENT
    "ASAN_OPTIONS=${_common}:detect_leaks=1:abort_on_error=1:strict_string_checks=1"
    "UBSAN_OPTIONS=${_common}:halt_on_error=1"
    "TSAN_OPTIONS=${_common}:halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan.supp")
  if(RELAXPS_SANITIZER MATCHES "thread")
    set(_relaxps_time_scale 5)
  else()
    set(_relaxps_time_scale 3)
  endif()
endif()
set(RELAXPS_TEST_TIMEOUT_SCALE ${_relaxps_time_scale} CACHE STRING
  "Multiplier on test timeouts (sanitized builds run several times slower)")
list(APPEND RELAXPS_TEST_ENVIRONMENT "RELAXPS_TEST_TIME_SCALE=${RELAXPS_TEST_TIMEOUT_SCALE}")

if(RELAXPS_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "RELAXPS_FUZZ needs clang (-DCMAKE_CXX_COMPILER=clang++-14)")
  endif()
  # Coverage feedback from every library the fuzz targets call.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
