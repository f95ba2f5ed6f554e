# Installs the strata_client component of BUILD_DIR into WORK_DIR/prefix,
# builds EXAMPLE_DIR against it twice (find_package(strata) + strata::client,
# and `pkg-config --cflags --libs strata` on the command line), and runs
# each example against a port where nothing listens: it must fail with exit
# status 1 and an UNAVAILABLE line. Then installs everything into
# WORK_DIR/full and checks the three binaries are there and run.
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
foreach(f include/strata/client.h lib/pkgconfig/strata.pc
          share/strata/proto/strata/v1/inference.proto
          share/strata/proto/strata/v1/worker.proto)
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

function(check_example path)
  execute_process(COMMAND ${path} 127.0.0.1:1 hi 4
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 60)
  if(NOT rc EQUAL 1 OR NOT err MATCHES "127.0.0.1:1: UNAVAILABLE")
    message(FATAL_ERROR "${path} against no server: exit ${rc}, "
                        "stderr:\n${err}")
  endif()
endfunction()
check_example(${WORK_DIR}/build/generate_example)

# pkg-config: the flags of lib/pkgconfig/strata.pc (its Requires bring
# gRPC, Protobuf and absl), one compiler command.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (apt-get install pkg-config)")
endif()
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs strata
                RESULT_VARIABLE rc OUTPUT_VARIABLE flags ERROR_VARIABLE err
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0 OR NOT flags MATCHES "-lstrata_client")
  message(FATAL_ERROR "pkg-config --cflags --libs strata: exit ${rc}: "
                      "${flags}\n${err}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run("building the example with pkg-config" ${CXX_COMPILER} -std=c++20
    ${EXAMPLE_DIR}/generate_example.cc ${flags}
    -o ${WORK_DIR}/generate_example_pc)
check_example(${WORK_DIR}/generate_example_pc)

# A whole install: the binaries beside the library.
set(full ${WORK_DIR}/full)
run("cmake --install (all)" ${CMAKE_COMMAND} --install ${BUILD_DIR}
    --prefix ${full})
foreach(program strata strata-worker strata-coordinator)
  execute_process(COMMAND ${full}/bin/${program} --version
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 60)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "^${program} [0-9]")
    message(FATAL_ERROR "installed bin/${program} --version: exit ${rc}: "
                        "${out}${err}")
  endif()
endforeach()
foreach(f lib/pkgconfig/strata.pc lib/cmake/strata/strataConfig.cmake
          share/strata/proto/strata/v1/inference.proto)
  if(NOT EXISTS ${full}/${f})
    message(FATAL_ERROR "not installed by a whole install: ${f}")
  endif()
endforeach()
message(STATUS "installed package OK: ${prefix}, ${full}")
file(REMOVE_RECURSE ${WORK_DIR})
