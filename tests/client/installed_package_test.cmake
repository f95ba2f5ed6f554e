# Installs the strata_client component of BUILD_DIR into WORK_DIR/prefix,
# builds EXAMPLE_DIR against it (find_package(strata) + strata::client), and
# runs the example against a port where nothing listens: it must fail with
# exit status 1 and an UNAVAILABLE line.
foreach(var BUILD_DIR EXAMPLE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "installed_package_test: -D${var}= missing")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
    --component strata_client)
foreach(f include/strata/client.h)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
file(GLOB_RECURSE configs ${prefix}/*/strataConfig.cmake)
if(NOT configs)
  message(FATAL_ERROR "no strataConfig.cmake under ${prefix}")
endif()

run("configuring the example" ${CMAKE_COMMAND} -S ${EXAMPLE_DIR}
    -B ${WORK_DIR}/build -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
run("building the example" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)

execute_process(COMMAND ${WORK_DIR}/build/generate_example 127.0.0.1:1 hi 4
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 60)
if(NOT rc EQUAL 1 OR NOT err MATCHES "127.0.0.1:1: UNAVAILABLE")
  message(FATAL_ERROR "generate_example against no server: exit ${rc}, "
                      "stderr:\n${err}")
endif()
message(STATUS "installed package OK: ${prefix}")
file(REMOVE_RECURSE ${WORK_DIR})
