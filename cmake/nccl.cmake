# NCCL, for the NCCL activation link (worker/nccl_link.h): sets
# STRATA_HAVE_NCCL (ON or OFF) and, when ON, the imported target strata::nccl
# (libnccl and nccl.h; the link also needs CUDA::cudart).
#
# MERGE POINT (issue 32): the top-level option STRATA_CUDA (AUTO|ON|OFF) and
# STRATA_HAVE_CUDA come with the CUDA backend's branch. Once STRATA_HAVE_CUDA
# is defined before this file is included, NCCL is looked for exactly when
# CUDA is on. Until then, only when STRATA_CUDA is given and not OFF
# (scripts/gpu-bundle.sh passes -DSTRATA_CUDA=ON): a default build, and CI
# without nvcc, is unchanged.
set(STRATA_HAVE_NCCL OFF)
set(_strata_want_nccl OFF)
if(DEFINED STRATA_HAVE_CUDA)
  if(STRATA_HAVE_CUDA)
    set(_strata_want_nccl ON)
  endif()
elseif(DEFINED STRATA_CUDA AND NOT STRATA_CUDA STREQUAL "OFF")
  set(_strata_want_nccl ON)
endif()
if(_strata_want_nccl)
  find_package(CUDAToolkit QUIET)
  find_library(STRATA_NCCL_LIBRARY NAMES nccl
               HINTS ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR})
  find_path(STRATA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(CUDAToolkit_FOUND AND STRATA_NCCL_LIBRARY AND STRATA_NCCL_INCLUDE_DIR)
    if(NOT TARGET strata::nccl)
      add_library(strata::nccl UNKNOWN IMPORTED GLOBAL)
      set_target_properties(strata::nccl PROPERTIES
        IMPORTED_LOCATION "${STRATA_NCCL_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${STRATA_NCCL_INCLUDE_DIR}")
    endif()
    set(STRATA_HAVE_NCCL ON)
  endif()
  message(STATUS "strata: NCCL link: ${STRATA_HAVE_NCCL} (library: ${STRATA_NCCL_LIBRARY}, "
                 "CUDA toolkit found: ${CUDAToolkit_FOUND})")
endif()
unset(_strata_want_nccl)
