#include "tests/cuda/emulated_step_kernels.h"

#include <string>

#include "model/ggml_type.h"
#include "tests/cuda/cuda_emulator.h"
#include "worker/backend.h"
#include "worker/cuda/kernels/flash_attention_source.h"
#include "worker/cuda/kernels/matvec_source.h"
#include "worker/cuda/kernels/mma_source.h"
#include "worker/cuda/kernels/rms_norm_source.h"
#include "worker/cuda/kernels/sources.h"
#include "worker/cuda/kernels/wgmma_source.h"
#include "worker/cuda/step_kernels.h"

// The host builds, with step_sources()'s options (THREADS and NCOLS).
namespace strata::worker::step_host {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define THREADS 256  // cuda_kernels::kStepMatvecThreads: the largest block
namespace matvec_w1_c1 {
using namespace strata::cuda_emulation;
#define NCOLS 1
#define ROW_WARPS 1
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w1_c1
namespace matvec_w1_c2 {
using namespace strata::cuda_emulation;
#define NCOLS 2
#define ROW_WARPS 1
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w1_c2
namespace matvec_w1_c4 {
using namespace strata::cuda_emulation;
#define NCOLS 4
#define ROW_WARPS 1
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w1_c4
namespace matvec_w1_c8 {
using namespace strata::cuda_emulation;
#define NCOLS 8
#define ROW_WARPS 1
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w1_c8
namespace matvec_w1_c16 {
using namespace strata::cuda_emulation;
#define NCOLS 16
#define ROW_WARPS 1
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w1_c16
namespace matvec_w2_c1 {
using namespace strata::cuda_emulation;
#define NCOLS 1
#define ROW_WARPS 2
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w2_c1
namespace matvec_w2_c2 {
using namespace strata::cuda_emulation;
#define NCOLS 2
#define ROW_WARPS 2
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w2_c2
namespace matvec_w2_c4 {
using namespace strata::cuda_emulation;
#define NCOLS 4
#define ROW_WARPS 2
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w2_c4
namespace matvec_w2_c8 {
using namespace strata::cuda_emulation;
#define NCOLS 8
#define ROW_WARPS 2
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w2_c8
namespace matvec_w2_c16 {
using namespace strata::cuda_emulation;
#define NCOLS 16
#define ROW_WARPS 2
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w2_c16
namespace matvec_w4_c1 {
using namespace strata::cuda_emulation;
#define NCOLS 1
#define ROW_WARPS 4
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w4_c1
namespace matvec_w4_c2 {
using namespace strata::cuda_emulation;
#define NCOLS 2
#define ROW_WARPS 4
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w4_c2
namespace matvec_w4_c4 {
using namespace strata::cuda_emulation;
#define NCOLS 4
#define ROW_WARPS 4
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w4_c4
namespace matvec_w4_c8 {
using namespace strata::cuda_emulation;
#define NCOLS 8
#define ROW_WARPS 4
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w4_c8
namespace matvec_w4_c16 {
using namespace strata::cuda_emulation;
#define NCOLS 16
#define ROW_WARPS 4
#define WARP_ROWS (::strata::worker::cuda_kernels::matvec_i8_warp_rows(NCOLS))
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/matvec_mma.cuh"
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
#undef STRATA_MATVEC_MMA_TILES
#undef STRATA_MATVEC_MMA_ENTRY
}  // namespace matvec_w4_c16
#undef THREADS
#define THREADS 128
namespace mma {
using namespace strata::cuda_emulation;
#define NCOLS 1
#define ROW_WARPS 1
#define STRATA_MATVEC_NO_ENTRIES
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/mma.cuh"
#undef STRATA_MATVEC_NO_ENTRIES
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
}  // namespace mma
#undef THREADS
#define THREADS 256
namespace wgmma {
using namespace strata::cuda_emulation;
#define NCOLS 1
#define ROW_WARPS 1
#define STRATA_MATVEC_NO_ENTRIES
#include "worker/cuda/kernels/matvec.cuh"
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/wgmma_ops.cuh"
#include "worker/cuda/kernels/wgmma.cuh"
#undef STRATA_MATVEC_NO_ENTRIES
#undef NCOLS
#undef ROW_WARPS
#undef WARP_ROWS
#undef STRATA_UNROLL
#undef STRATA_ENTRIES
#undef STRATA_I8_ENTRY
#undef STRATA_IDS_ENTRY
#undef STRATA_IDS_I8_ENTRY
}  // namespace wgmma
#undef THREADS
namespace flash32 {
using namespace strata::cuda_emulation;
#define THREADS 128
#define HEAD_DIM 32
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/flash_attention.cuh"
#undef HEAD_DIM
#undef THREADS
}  // namespace flash32
namespace flash64 {
using namespace strata::cuda_emulation;
#define THREADS 128
#define HEAD_DIM 64
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/flash_attention.cuh"
#undef HEAD_DIM
#undef THREADS
}  // namespace flash64
namespace flash80 {
using namespace strata::cuda_emulation;
#define THREADS 128
#define HEAD_DIM 80
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/flash_attention.cuh"
#undef HEAD_DIM
#undef THREADS
}  // namespace flash80
namespace flash96 {
using namespace strata::cuda_emulation;
#define THREADS 128
#define HEAD_DIM 96
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/flash_attention.cuh"
#undef HEAD_DIM
#undef THREADS
}  // namespace flash96
namespace flash128 {
using namespace strata::cuda_emulation;
#define THREADS 128
#define HEAD_DIM 128
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/flash_attention.cuh"
#undef HEAD_DIM
#undef THREADS
}  // namespace flash128
namespace flash256 {
using namespace strata::cuda_emulation;
#define THREADS 128
#define HEAD_DIM 256
#include "worker/cuda/kernels/mma_ops.cuh"
#include "worker/cuda/kernels/flash_attention.cuh"
#undef HEAD_DIM
#undef THREADS
}  // namespace flash256
namespace rms {
using namespace strata::cuda_emulation;
#define THREADS 256
#include "worker/cuda/kernels/quantize.cuh"
#include "worker/cuda/kernels/rms_norm.cuh"
#undef THREADS
}  // namespace rms
namespace elementwise {
using namespace strata::cuda_emulation;
#include "worker/cuda/kernels/quantize.cuh"
#include "worker/cuda/kernels/elementwise.cuh"
}  // namespace elementwise
namespace attention {
using namespace strata::cuda_emulation;
#define THREADS 128
#include "worker/cuda/kernels/quantize.cuh"
#include "worker/cuda/kernels/attention.cuh"
#undef THREADS
}  // namespace attention
namespace sample {
using namespace strata::cuda_emulation;
#define THREADS 256
static_assert(strata::worker::kMaxTopK == 1024, "sample.cuh's STRATA_TOP_K_MAX default is the backend's");
#include "worker/cuda/kernels/sample.cuh"
#include "worker/cuda/kernels/moe_route.cuh"
#undef THREADS
}  // namespace sample
#pragma GCC diagnostic pop
}  // namespace strata::worker::step_host

namespace strata::worker::testing {
namespace {

static_assert(cuda_kernels::kStepMatvecThreads == 256 && cuda_kernels::kStepMmaThreads == 128 &&
                  cuda_kernels::kStepRmsNormThreads == 256 &&
                  cuda_kernels::kStepSampleThreads == 256 &&
                  cuda_kernels::kStepAttentionThreads == 128 &&
                  cuda_kernels::kStepWgmmaThreads == 256,
              "the host builds above use step_sources()'s THREADS");

// One (ROW_WARPS w, NCOLS i) host build (all types) registered as each
// type's own source [t][w][i].
#define STRATA_ADD_MATVEC(ns)                                                                 \
  [](EmulatedDeviceApi& to, const cuda_kernels::StepSources& sources, size_t w, size_t i) {    \
    using namespace step_host::ns;                                                             \
    const auto add = [&](GgmlType type, HostEntry matvec, HostEntry matvec3, HostEntry rows) { \
      const auto& source = sources.matvec[cuda_kernels::step_matvec_type_index(type)][w][i];   \
      to.add(source, std::string(cuda_kernels::matvec_entry(type)), std::move(matvec));       \
      to.add(source, cuda_kernels::matvec3_entry(type), std::move(matvec3));                  \
      to.add(source, cuda_kernels::get_rows_entry(type), std::move(rows));                    \
    };                                                                                         \
    add(GgmlType::kF32, adapt(strata_matvec_f32), adapt(strata_matvec3_f32), adapt(strata_get_rows_f32));                \
    add(GgmlType::kF16, adapt(strata_matvec_f16), adapt(strata_matvec3_f16), adapt(strata_get_rows_f16));                \
    add(GgmlType::kQ4_0, adapt(strata_matvec_q4_0), adapt(strata_matvec3_q4_0), adapt(strata_get_rows_q4_0));             \
    add(GgmlType::kQ4_1, adapt(strata_matvec_q4_1), adapt(strata_matvec3_q4_1), adapt(strata_get_rows_q4_1));             \
    add(GgmlType::kQ5_0, adapt(strata_matvec_q5_0), adapt(strata_matvec3_q5_0), adapt(strata_get_rows_q5_0));             \
    add(GgmlType::kQ5_1, adapt(strata_matvec_q5_1), adapt(strata_matvec3_q5_1), adapt(strata_get_rows_q5_1));             \
    add(GgmlType::kQ8_0, adapt(strata_matvec_q8_0), adapt(strata_matvec3_q8_0), adapt(strata_get_rows_q8_0));             \
    add(GgmlType::kMXFP4, adapt(strata_matvec_mxfp4), adapt(strata_matvec3_mxfp4), adapt(strata_get_rows_mxfp4));          \
    add(GgmlType::kQ4_K, adapt(strata_matvec_q4_k), adapt(strata_matvec3_q4_k), adapt(strata_get_rows_q4_k));             \
    add(GgmlType::kQ5_K, adapt(strata_matvec_q5_k), adapt(strata_matvec3_q5_k), adapt(strata_get_rows_q5_k));             \
    add(GgmlType::kQ6_K, adapt(strata_matvec_q6_k), adapt(strata_matvec3_q6_k), adapt(strata_get_rows_q6_k));             \
    const auto add_i8 = [&](GgmlType type, HostEntry matvec3_i8) {                             \
      const auto& source = sources.matvec[cuda_kernels::step_matvec_type_index(type)][w][i];   \
      to.add(source, cuda_kernels::matvec3_i8_entry(type), std::move(matvec3_i8));            \
    };                                                                                         \
    add_i8(GgmlType::kQ4_0, adapt(strata_matvec3_i8_q4_0));                                    \
    add_i8(GgmlType::kQ4_1, adapt(strata_matvec3_i8_q4_1));                                    \
    add_i8(GgmlType::kQ5_1, adapt(strata_matvec3_i8_q5_1));                                    \
    add_i8(GgmlType::kQ5_0, adapt(strata_matvec3_i8_q5_0));                                    \
    add_i8(GgmlType::kQ8_0, adapt(strata_matvec3_i8_q8_0));                                    \
    add_i8(GgmlType::kMXFP4, adapt(strata_matvec3_i8_mxfp4));                                  \
    add_i8(GgmlType::kQ4_K, adapt(strata_matvec3_i8_q4_k));                                    \
    add_i8(GgmlType::kQ5_K, adapt(strata_matvec3_i8_q5_k));                                    \
    add_i8(GgmlType::kQ6_K, adapt(strata_matvec3_i8_q6_k));                                    \
    const auto add_mma = [&](GgmlType type, HostEntry matvec3_mma) {                           \
      const auto& source = sources.matvec[cuda_kernels::step_matvec_type_index(type)][w][i];   \
      to.add(source, cuda_kernels::matvec3_mma_entry(type), std::move(matvec3_mma));          \
    };                                                                                         \
    add_mma(GgmlType::kQ4_0, adapt(strata_matvec3_mma_q4_0));                                  \
    add_mma(GgmlType::kQ4_1, adapt(strata_matvec3_mma_q4_1));                                  \
    add_mma(GgmlType::kQ5_1, adapt(strata_matvec3_mma_q5_1));                                  \
    add_mma(GgmlType::kQ5_0, adapt(strata_matvec3_mma_q5_0));                                  \
    add_mma(GgmlType::kQ8_0, adapt(strata_matvec3_mma_q8_0));                                  \
    add_mma(GgmlType::kMXFP4, adapt(strata_matvec3_mma_mxfp4));                                \
    add_mma(GgmlType::kQ4_K, adapt(strata_matvec3_mma_q4_k));                                  \
    add_mma(GgmlType::kQ5_K, adapt(strata_matvec3_mma_q5_k));                                  \
    add_mma(GgmlType::kQ6_K, adapt(strata_matvec3_mma_q6_k));                                  \
  }

// The expert-slot entries of a (ROW_WARPS w, NCOLS 1) host build.
#define STRATA_ADD_MATVEC_IDS(ns)                                                             \
  [](EmulatedDeviceApi& to, const cuda_kernels::StepSources& sources, size_t w) {              \
    using namespace step_host::ns;                                                             \
    const auto add = [&](GgmlType type, HostEntry ids, HostEntry ids_i8) {                     \
      const auto& source = sources.matvec[cuda_kernels::step_matvec_type_index(type)][w][0];   \
      to.add(source, cuda_kernels::matvec_ids_entry(type), std::move(ids));                   \
      if (ids_i8.call) to.add(source, cuda_kernels::matvec_ids_i8_entry(type), std::move(ids_i8)); \
    };                                                                                         \
    add(GgmlType::kF32, adapt(strata_matvec_ids_f32), HostEntry{});                            \
    add(GgmlType::kF16, adapt(strata_matvec_ids_f16), HostEntry{});                            \
    add(GgmlType::kQ4_0, adapt(strata_matvec_ids_q4_0), adapt(strata_matvec_ids_i8_q4_0));     \
    add(GgmlType::kQ4_1, adapt(strata_matvec_ids_q4_1), adapt(strata_matvec_ids_i8_q4_1));     \
    add(GgmlType::kQ5_0, adapt(strata_matvec_ids_q5_0), adapt(strata_matvec_ids_i8_q5_0));     \
    add(GgmlType::kQ5_1, adapt(strata_matvec_ids_q5_1), adapt(strata_matvec_ids_i8_q5_1));     \
    add(GgmlType::kQ8_0, adapt(strata_matvec_ids_q8_0), adapt(strata_matvec_ids_i8_q8_0));     \
    add(GgmlType::kMXFP4, adapt(strata_matvec_ids_mxfp4), adapt(strata_matvec_ids_i8_mxfp4));  \
    add(GgmlType::kQ4_K, adapt(strata_matvec_ids_q4_k), adapt(strata_matvec_ids_i8_q4_k));     \
    add(GgmlType::kQ5_K, adapt(strata_matvec_ids_q5_k), adapt(strata_matvec_ids_i8_q5_k));     \
    add(GgmlType::kQ6_K, adapt(strata_matvec_ids_q6_k), adapt(strata_matvec_ids_i8_q6_k));     \
  }

}  // namespace

HostEntry mma_host_entry(GgmlType type) {
  namespace mm = step_host::mma;
  switch (type) {
    case GgmlType::kQ4_0: return adapt(mm::strata_mma3_q4_0);
    case GgmlType::kQ4_1: return adapt(mm::strata_mma3_q4_1);
    case GgmlType::kQ5_0: return adapt(mm::strata_mma3_q5_0);
    case GgmlType::kQ5_1: return adapt(mm::strata_mma3_q5_1);
    case GgmlType::kQ8_0: return adapt(mm::strata_mma3_q8_0);
    case GgmlType::kMXFP4: return adapt(mm::strata_mma3_mxfp4);
    case GgmlType::kQ4_K: return adapt(mm::strata_mma3_q4_k);
    case GgmlType::kQ5_K: return adapt(mm::strata_mma3_q5_k);
    default: return adapt(mm::strata_mma3_q6_k);
  }
}

HostEntry wgmma_host_entry(GgmlType type) {
  namespace wg = step_host::wgmma;
  switch (type) {
    case GgmlType::kQ4_0: return adapt(wg::strata_wgmma3_q4_0);
    case GgmlType::kQ4_1: return adapt(wg::strata_wgmma3_q4_1);
    case GgmlType::kQ5_0: return adapt(wg::strata_wgmma3_q5_0);
    case GgmlType::kQ5_1: return adapt(wg::strata_wgmma3_q5_1);
    case GgmlType::kQ8_0: return adapt(wg::strata_wgmma3_q8_0);
    case GgmlType::kMXFP4: return adapt(wg::strata_wgmma3_mxfp4);
    case GgmlType::kQ4_K: return adapt(wg::strata_wgmma3_q4_k);
    case GgmlType::kQ5_K: return adapt(wg::strata_wgmma3_q5_k);
    default: return adapt(wg::strata_wgmma3_q6_k);
  }
}

HostEntry mma_i8_host_entry(GgmlType type) {
  namespace mm = step_host::mma;
  switch (type) {
    case GgmlType::kQ4_0: return adapt(mm::strata_mma3_i8_q4_0);
    case GgmlType::kQ4_1: return adapt(mm::strata_mma3_i8_q4_1);
    case GgmlType::kQ5_1: return adapt(mm::strata_mma3_i8_q5_1);
    case GgmlType::kQ5_0: return adapt(mm::strata_mma3_i8_q5_0);
    case GgmlType::kQ8_0: return adapt(mm::strata_mma3_i8_q8_0);
    case GgmlType::kMXFP4: return adapt(mm::strata_mma3_i8_mxfp4);
    case GgmlType::kQ4_K: return adapt(mm::strata_mma3_i8_q4_k);
    case GgmlType::kQ5_K: return adapt(mm::strata_mma3_i8_q5_k);
    case GgmlType::kQ6_K: return adapt(mm::strata_mma3_i8_q6_k);
    default:
      std::fprintf(stderr, "mma_i8_host_entry: no int8 build of %s\n",
                   std::string(ggml_type_info(type).name).c_str());
      std::abort();
  }
}

HostEntry flash_host_entry(int head_dim) {
  switch (head_dim) {
    case 32: return adapt(step_host::flash32::strata_flash_attention_rows);
    case 64: return adapt(step_host::flash64::strata_flash_attention_rows);
    case 80: return adapt(step_host::flash80::strata_flash_attention_rows);
    case 96: return adapt(step_host::flash96::strata_flash_attention_rows);
    case 128: return adapt(step_host::flash128::strata_flash_attention_rows);
    default: return adapt(step_host::flash256::strata_flash_attention_rows);
  }
}

void add_step_kernels(EmulatedDeviceApi& api) {
  const cuda_kernels::StepSources& s = cuda_kernels::step_sources();
  static_assert(cuda_kernels::kStepMatvecColumns[0] == 1 &&
                cuda_kernels::kStepMatvecColumns[1] == 2 &&
                cuda_kernels::kStepMatvecColumns[2] == 4 &&
                cuda_kernels::kStepMatvecColumns[3] == 8 &&
                cuda_kernels::kStepMatvecColumns[4] == 16);
  static_assert(cuda_kernels::kStepRowWarps[0] == 1 && cuda_kernels::kStepRowWarps[1] == 2 &&
                cuda_kernels::kStepRowWarps[2] == 4);
  STRATA_ADD_MATVEC(matvec_w1_c1)(api, s, 0, 0);
  STRATA_ADD_MATVEC_IDS(matvec_w1_c1)(api, s, 0);
  STRATA_ADD_MATVEC_IDS(matvec_w2_c1)(api, s, 1);
  STRATA_ADD_MATVEC_IDS(matvec_w4_c1)(api, s, 2);
  STRATA_ADD_MATVEC(matvec_w1_c2)(api, s, 0, 1);
  STRATA_ADD_MATVEC(matvec_w1_c4)(api, s, 0, 2);
  STRATA_ADD_MATVEC(matvec_w1_c8)(api, s, 0, 3);
  STRATA_ADD_MATVEC(matvec_w1_c16)(api, s, 0, 4);
  STRATA_ADD_MATVEC(matvec_w2_c1)(api, s, 1, 0);
  STRATA_ADD_MATVEC(matvec_w2_c2)(api, s, 1, 1);
  STRATA_ADD_MATVEC(matvec_w2_c4)(api, s, 1, 2);
  STRATA_ADD_MATVEC(matvec_w2_c8)(api, s, 1, 3);
  STRATA_ADD_MATVEC(matvec_w2_c16)(api, s, 1, 4);
  STRATA_ADD_MATVEC(matvec_w4_c1)(api, s, 2, 0);
  STRATA_ADD_MATVEC(matvec_w4_c2)(api, s, 2, 1);
  STRATA_ADD_MATVEC(matvec_w4_c4)(api, s, 2, 2);
  STRATA_ADD_MATVEC(matvec_w4_c8)(api, s, 2, 3);
  STRATA_ADD_MATVEC(matvec_w4_c16)(api, s, 2, 4);
  for (const GgmlType type : cuda_kernels::kStepMatvecTypes) {
    if (cuda_kernels::mma3_entry(type).empty()) continue;
    api.add(s.mma[cuda_kernels::step_matvec_type_index(type)], cuda_kernels::mma3_entry(type),
            mma_host_entry(type));
    api.add(s.wgmma[cuda_kernels::step_matvec_type_index(type)], cuda_kernels::wgmma3_entry(type),
            wgmma_host_entry(type));
    if (cuda_kernels::mma3_i8_entry(type).empty()) continue;
    api.add(s.mma[cuda_kernels::step_matvec_type_index(type)], cuda_kernels::mma3_i8_entry(type),
            mma_i8_host_entry(type));
  }
  static_assert(cuda_kernels::kStepFlashHeadDims ==
                std::array<int, 6>{32, 64, 80, 96, 128, 256});
  for (size_t i = 0; i < cuda_kernels::kStepFlashHeadDims.size(); ++i) {
    api.add(s.flash[i], cuda_kernels::kFlashAttentionEntry,
            flash_host_entry(cuda_kernels::kStepFlashHeadDims[i]));
  }
  api.add(s.rms_norm, cuda_kernels::kRmsNormEntry, adapt(step_host::rms::strata_rms_norm));
  api.add(s.rms_norm, cuda_kernels::kAddRmsNormEntry, adapt(step_host::rms::strata_add_rms_norm));
  api.add(s.rms_norm, cuda_kernels::kRmsNormQuantizeEntry,
          adapt(step_host::rms::strata_rms_norm_quantize));
  api.add(s.rms_norm, cuda_kernels::kAddRmsNormQuantizeEntry,
          adapt(step_host::rms::strata_add_rms_norm_quantize));
  namespace ew = step_host::elementwise;
  api.add(s.elementwise, cuda_kernels::kRopeRotateEntry, adapt(ew::strata_rope_rotate));
  api.add(s.elementwise, cuda_kernels::kRopeRotateQkEntry, adapt(ew::strata_rope_rotate_qk));
  api.add(s.elementwise, cuda_kernels::kSwigluEntry, adapt(ew::strata_swiglu));
  api.add(s.elementwise, cuda_kernels::kSwigluQuantizeEntry, adapt(ew::strata_swiglu_quantize));
  api.add(s.elementwise, cuda_kernels::kAddEntry, adapt(ew::strata_add));
  api.add(s.elementwise, cuda_kernels::kAddBiasEntry, adapt(ew::strata_add_bias));
  api.add(s.elementwise, cuda_kernels::kAddBiasIdsEntry, adapt(ew::strata_add_bias_ids));
  api.add(s.elementwise, cuda_kernels::kStoreKvEntry, adapt(ew::strata_store_kv));
  api.add(s.elementwise, cuda_kernels::kScaleEntry, adapt(ew::strata_scale));
  api.add(s.elementwise, cuda_kernels::kSoftCapEntry, adapt(ew::strata_soft_cap));
  api.add(s.elementwise, cuda_kernels::kGegluEntry, adapt(ew::strata_geglu));
  api.add(s.elementwise, cuda_kernels::kSwigluOaiEntry, adapt(ew::strata_swiglu_oai));
  api.add(s.elementwise, cuda_kernels::kGatherRowsEntry, adapt(ew::strata_gather_rows));
  api.add(s.elementwise, cuda_kernels::kScatterRowsEntry, adapt(ew::strata_scatter_rows));
  api.add(s.elementwise, cuda_kernels::kMoeSumEntry, adapt(ew::strata_moe_sum));
  api.add(s.elementwise, cuda_kernels::kAddSharedExpertEntry,
          adapt(ew::strata_add_shared_expert));
  api.add(s.attention, cuda_kernels::kAttentionDecodeEntry,
          adapt(step_host::attention::strata_attention_decode));
  api.add(s.attention, cuda_kernels::kAttentionRowsEntry,
          adapt(step_host::attention::strata_attention_rows));
  api.add(s.attention, cuda_kernels::kAttentionBatchEntry,
          adapt(step_host::attention::strata_attention_batch));
  api.add(s.attention, cuda_kernels::kAttentionBatchQuantizeEntry,
          adapt(step_host::attention::strata_attention_batch_quantize));
  api.add(s.attention, cuda_kernels::kAttentionSplitScoresEntry,
          adapt(step_host::attention::strata_attention_split_scores));
  api.add(s.attention, cuda_kernels::kAttentionSplitWeighEntry,
          adapt(step_host::attention::strata_attention_split_weigh));
  api.add(s.elementwise, cuda_kernels::kStoreKvBatchEntry, adapt(ew::strata_store_kv_batch));
  api.add(s.elementwise, cuda_kernels::kRopeStoreKvBatchEntry,
          adapt(ew::strata_rope_store_kv_batch));
  api.add(s.elementwise, cuda_kernels::kRoundRowsEntry, adapt(ew::strata_round_rows));
  api.add(s.elementwise, cuda_kernels::kQuantizeRowsEntry, adapt(ew::strata_quantize_rows));
  api.add(s.sample, cuda_kernels::kArgmaxRowsEntry,
          adapt(step_host::sample::strata_argmax_rows));
  api.add(s.sample, cuda_kernels::kTopKRowsEntry, adapt(step_host::sample::strata_top_k_rows));
  api.add(s.sample, cuda_kernels::kMoeRouteEntry, adapt(step_host::sample::strata_moe_route));
}

std::unique_ptr<EmulatedDeviceApi> emulated_step_device() {
  auto api = std::make_unique<EmulatedDeviceApi>();
  add_step_kernels(*api);
  return api;
}

}  // namespace strata::worker::testing
