// list_cuda_devices / cuda_device (worker/cuda/cuda_device.h) and
// make_cuda_backend's device check.
#include "worker/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "worker/cuda/cuda_backend.h"

namespace strata::worker {
namespace {

TEST(CudaDevice, ListsDevicesWithNameCapabilityAndMemory) {
  STRATA_REQUIRE_CUDA_DEVICE(first);
  auto devices = list_cuda_devices();
  ASSERT_TRUE(devices.ok());
  for (const CudaDevice& d : *devices) {
    std::printf("cuda:%d %s sm_%d%d %.1f GiB %d SMs\n", d.ordinal,
                d.name.c_str(), d.cc_major, d.cc_minor,
                static_cast<double>(d.total_memory_bytes) / (1 << 30),
                d.multiprocessors);
    EXPECT_FALSE(d.name.empty());
    EXPECT_GE(d.cc_major, 5);
    EXPECT_GT(d.total_memory_bytes, uint64_t{1} << 30);
    EXPECT_GT(d.multiprocessors, 0);
  }
  EXPECT_GT(cuda_driver_version(), 0);
  EXPECT_EQ(first.compute_arch().rfind("compute_", 0), 0u);
}

TEST(CudaDevice, AbsentOrdinalIsFailedPreconditionNamingIt) {
  STRATA_REQUIRE_CUDA_DEVICE(first);
  auto d = cuda_device(1000);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("cuda:1000: no such device"),
            std::string::npos)
      << d.status();
}

// Without a device (this test's other half runs on machines without one):
// the error carries cudart's explanation.
TEST(CudaDevice, NoDeviceErrorSaysWhy) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
    GTEST_SKIP() << "this machine has a CUDA device; the no-device error is "
                    "not reachable";
  }
  auto devices = list_cuda_devices();
  ASSERT_FALSE(devices.ok());
  EXPECT_EQ(devices.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(devices.status().message().rfind("no CUDA device: ", 0), 0u)
      << devices.status();
  CudaBackendOptions options;
  options.device = 2;
  auto backend = make_cuda_backend(nullptr, arch::Hyperparameters{},
                                   BlockRange{0, 1}, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(backend.status().message().rfind("cuda:2: no CUDA device: ", 0), 0u)
      << backend.status();
}

// With a device: past the device check, the backend's own checks (a
// model is required). Its forward pass on the device: device_backend_test.cc.
TEST(CudaBackend, PassesTheDeviceCheckThenNeedsAModel) {
  STRATA_REQUIRE_CUDA_DEVICE(first);
  CudaBackendOptions options;
  options.device = first.ordinal;
  auto backend = make_cuda_backend(nullptr, arch::Hyperparameters{},
                                   BlockRange{0, 1}, options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.status().message().find("no model"), std::string::npos)
      << backend.status();
}

}  // namespace
}  // namespace strata::worker
