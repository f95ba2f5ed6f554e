# CUDA (issue 32): STRATA_CUDA = AUTO (default) | ON | OFF.
#   AUTO: CUDA is on when check_language(CUDA) finds nvcc; a machine without
#         nvcc (CI) builds the CPU-only tree as before.
#   ON:   CUDA is required; configuring fails, saying so, without nvcc.
#   OFF:  nothing CUDA is built or linked.
# Sets STRATA_HAVE_CUDA (ON or OFF); targets that use CUDA add the compile
# definition STRATA_HAVE_CUDA=1 themselves (worker/cuda/CMakeLists.txt).
#
# Only the runtime (CUDA::cudart, which loads the driver itself at run
# time) and NVRTC are linked, never CUDA::cuda_driver: libcuda.so.1 comes
# with the driver and is absent on machines without a GPU, where the
# binaries must still start. The kernels are NVRTC sources compiled at load
# (worker/cuda/nvrtc_compiler.h), so no .cu file is compiled by nvcc yet and
# the CUDA language is not enabled: nvcc's host compiler and the sanitizer
# flags (clang's -fsanitize=...) never meet.
set(STRATA_CUDA AUTO CACHE STRING "CUDA backend: AUTO (when nvcc is found), ON (required), OFF")
set_property(CACHE STRATA_CUDA PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${STRATA_CUDA}" _strata_cuda_mode)
if(NOT _strata_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "STRATA_CUDA=${STRATA_CUDA}: expected AUTO, ON or OFF")
endif()
set(STRATA_HAVE_CUDA OFF)
set(_strata_cuda_why "")
if(NOT _strata_cuda_mode STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cudart AND TARGET CUDA::nvrtc)
      set(STRATA_HAVE_CUDA ON)
    else()
      set(_strata_cuda_why "; nvcc found but not cudart and nvrtc")
    endif()
    if(NOT STRATA_HAVE_CUDA AND _strata_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "STRATA_CUDA=ON: nvcc (${CMAKE_CUDA_COMPILER}) was found but not "
                          "the CUDA toolkit's cudart and nvrtc libraries")
    endif()
  else()
    set(_strata_cuda_why "; no nvcc found")
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND _strata_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON but no CUDA compiler (nvcc) was found: put it on PATH, "
                        "set CUDACXX or CMAKE_CUDA_COMPILER, or configure with -DSTRATA_CUDA=OFF")
  endif()
endif()
if(STRATA_HAVE_CUDA AND NOT CMAKE_CUDA_ARCHITECTURES)
  # A100 (sm_80) and H100/H200 (sm_90); for .cu files when they come, and
  # the architectures the tests check NVRTC output against.
  set(CMAKE_CUDA_ARCHITECTURES "80;90")
endif()
if(STRATA_HAVE_CUDA)
  message(STATUS "strata: CUDA backend: ON (STRATA_CUDA=${STRATA_CUDA}; nvcc ${CMAKE_CUDA_COMPILER}, "
                 "toolkit ${CUDAToolkit_VERSION})")
else()
  message(STATUS "strata: CUDA backend: OFF (STRATA_CUDA=${STRATA_CUDA}"
                 "${_strata_cuda_why})")
endif()
unset(_strata_cuda_mode)
unset(_strata_cuda_why)
