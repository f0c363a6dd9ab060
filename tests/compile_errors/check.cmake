# Compiles one snippet that must NOT compile and checks that the compiler's
# message contains every "// expect: REGEX" line of the snippet (issue 17:
# an unencodable lock_on argument names its position, its type and why).
# -DCXX=compiler -DINCLUDE_DIR=... [-DLAYER_ROOT=...] -DCASE=file.cpp
set(include_flags -I${INCLUDE_DIR})
if(LAYER_ROOT)
  list(APPEND include_flags -I${LAYER_ROOT})
endif()
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only ${include_flags} ${CASE}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(status EQUAL 0)
  message(FATAL_ERROR "${CASE} compiled, but it must be rejected")
endif()
file(STRINGS ${CASE} expectations REGEX "^// expect: ")
if(NOT expectations)
  message(FATAL_ERROR "${CASE} has no // expect: lines")
endif()
foreach(line IN LISTS expectations)
  string(REPLACE "// expect: " "" pattern "${line}")
  if(NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "${CASE}: the compiler's message lacks /${pattern}/:\n${err}")
  endif()
endforeach()
