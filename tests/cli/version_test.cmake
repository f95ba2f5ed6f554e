# `--version` of each binary: exit 0 and one line
#   PROGRAM VERSION (git DESCRIBE)
# with VERSION project(VERSION) and DESCRIBE what cmake/version.cmake found
# at configure time (an abbreviated commit id, "-dirty" after it, or
# "unknown").
#   cmake -DPROGRAMS="strata=PATH;strata-worker=PATH" -DVERSION=0.1.0
#         -DGIT=1a2b3c4 -P version_test.cmake
foreach(var PROGRAMS VERSION GIT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "version_test: -D${var}= missing")
  endif()
endforeach()
if(NOT GIT MATCHES "^([0-9a-f]+(-dirty)?|unknown)$")
  message(FATAL_ERROR "configure-time git describe '${GIT}' is neither a "
                      "commit id nor unknown")
endif()
if(NOT VERSION MATCHES "^[0-9]+\\.[0-9]+\\.[0-9]+$")
  message(FATAL_ERROR "project version '${VERSION}' is not X.Y.Z")
endif()
foreach(entry ${PROGRAMS})
  string(REPLACE "=" ";" parts ${entry})
  list(GET parts 0 name)
  list(GET parts 1 path)
  execute_process(COMMAND ${path} --version RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  set(want "${name} ${VERSION} (git ${GIT})\n")
  if(NOT rc EQUAL 0 OR NOT out STREQUAL want)
    message(FATAL_ERROR "${name} --version: exit ${rc}, stdout '${out}', "
                        "stderr '${err}'; want exit 0 and '${want}'")
  endif()
  message(STATUS "${name} --version: ${out}")
endforeach()
