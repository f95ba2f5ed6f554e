// Shared by the CUDA tests: skip, saying why, when no device can be used.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "worker/cuda/cuda_device.h"

namespace strata::worker::testing {

// The first device, or a skip with list_cuda_devices()'s message ("no CUDA
// device: cudaGetDeviceCount: ...").
#define STRATA_REQUIRE_CUDA_DEVICE(device_var)                       \
  ::strata::worker::CudaDevice device_var;                           \
  do {                                                               \
    auto devices_ = ::strata::worker::list_cuda_devices();           \
    if (!devices_.ok()) GTEST_SKIP() << devices_.status().message(); \
    device_var = devices_->front();                                  \
  } while (0)

}  // namespace strata::worker::testing
