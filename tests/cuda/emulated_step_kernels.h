// The device backend's kernels (worker/cuda/step_kernels.h) on the CPU
// emulation: every source of step_sources() compiled for the host with the
// same options (tests/cuda/cuda_emulator.h) and registered in an
// EmulatedDeviceApi, so that make_device_backend runs on it unchanged.
#pragma once

#include <memory>

#include "model/ggml_type.h"
#include "tests/cuda/emulated_device_api.h"

namespace strata::worker::testing {

// Registers every entry of every step source in `api`.
void add_step_kernels(EmulatedDeviceApi& api);

// The host build of step_sources().mma for `type` (one with an
// mma3_entry).
HostEntry mma_host_entry(GgmlType type);
// The host build of step_sources().wgmma for `type` (one with an
// mma3_entry).
HostEntry wgmma_host_entry(GgmlType type);
// The same for its int8 entry (one with an mma3_i8_entry).
HostEntry mma_i8_host_entry(GgmlType type);

// The host build of step_sources().flash for `head_dim` (one of
// kStepFlashHeadDims).
HostEntry flash_host_entry(int head_dim);

// A new EmulatedDeviceApi with the step kernels registered.
std::unique_ptr<EmulatedDeviceApi> emulated_step_device();

}  // namespace strata::worker::testing
