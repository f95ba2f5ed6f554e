// KvCache (worker/kv_cache.h): rows stored per layer come back converted to
// the cache type, raw rows move between caches, bad shapes are refused, and
// the memory: untouched positions are not resident, and a destroyed cache
// leaves no mapping behind (mincore(2) answers ENOMEM for unmapped pages).
#include "worker/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/reference/fp16.h"

namespace strata::worker_test {
namespace {

using worker::KvCache;
using worker::KvCacheShape;

KvCacheShape shape(GgmlType type, int n_ctx) {
  KvCacheShape s;
  s.n_layer = 3;
  s.n_ctx = n_ctx;
  s.n_head_kv = 2;
  s.head_dim_k = 8;
  s.head_dim_v = 4;
  s.type = type;
  return s;
}

// Distinct values per (layer, position, element, k or v) that f16 holds
// exactly (multiples of 1/8 under 256).
float value(int layer, int pos, int i, bool is_v) {
  return static_cast<float>(((layer * 131 + pos * 17 + i * 3 + (is_v ? 7 : 0)) % 2000)) / 8.0f -
         100.0f;
}

void store_rows(KvCache& cache, int layer, int pos, int n) {
  const KvCacheShape& s = cache.shape();
  std::vector<float> k(static_cast<size_t>(n) * s.n_head_kv * s.head_dim_k);
  std::vector<float> v(static_cast<size_t>(n) * s.n_head_kv * s.head_dim_v);
  const int kr = s.n_head_kv * s.head_dim_k, vr = s.n_head_kv * s.head_dim_v;
  for (int p = 0; p < n; ++p) {
    for (int i = 0; i < kr; ++i) k[static_cast<size_t>(p) * kr + i] = value(layer, pos + p, i, false);
    for (int i = 0; i < vr; ++i) v[static_cast<size_t>(p) * vr + i] = value(layer, pos + p, i, true);
  }
  cache.store(layer, pos, n, k.data(), v.data());
}

float element(const void* base, GgmlType type, int64_t index) {
  if (type == GgmlType::kF32) return static_cast<const float*>(base)[index];
  return reference::f16_to_f32(static_cast<const uint16_t*>(base)[index]);
}

class KvCacheTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(KvCacheTypes, StoredRowsComeBackPerLayer) {
  absl::StatusOr<std::unique_ptr<KvCache>> made = KvCache::create(shape(GetParam(), 64));
  ASSERT_TRUE(made.ok()) << made.status();
  KvCache& cache = **made;
  for (int l = 0; l < 3; ++l) {
    store_rows(cache, l, 0, 5);
    store_rows(cache, l, 5, 1);
  }
  cache.advance(6);
  EXPECT_EQ(cache.length(), 6);
  const int kr = 16, vr = 8;
  for (int l = 0; l < 3; ++l) {
    kernels::KvView view = cache.view(l, cache.length());
    EXPECT_EQ(view.n_kv, 6);
    EXPECT_EQ(view.type, GetParam());
    for (int p = 0; p < 6; ++p) {
      for (int i = 0; i < kr; ++i) {
        ASSERT_EQ(element(view.k, view.type, p * kr + i), value(l, p, i, false)) << l << " " << p;
      }
      for (int i = 0; i < vr; ++i) {
        ASSERT_EQ(element(view.v, view.type, p * vr + i), value(l, p, i, true)) << l << " " << p;
      }
    }
  }
  cache.truncate(2);
  EXPECT_EQ(cache.length(), 2);
}

TEST_P(KvCacheTypes, RawRowsMoveBetweenCaches) {
  auto a = KvCache::create(shape(GetParam(), 32));
  auto b = KvCache::create(shape(GetParam(), 32));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int l = 0; l < 3; ++l) store_rows(**a, l, 0, 10);
  (*a)->advance(10);
  const int64_t row = (*a)->row_bytes();
  EXPECT_EQ(row, 3 * (16 + 8) * (GetParam() == GgmlType::kF16 ? 2 : 4));
  std::vector<uint8_t> rows(static_cast<size_t>(row) * 4);
  (*a)->read_rows(3, 4, rows.data());
  (*b)->write_rows(7, 4, rows.data());
  for (int l = 0; l < 3; ++l) {
    kernels::KvView va = (*a)->view(l, 10), vb = (*b)->view(l, 11);
    for (int p = 0; p < 4; ++p) {
      for (int i = 0; i < 16; ++i) {
        ASSERT_EQ(element(vb.k, vb.type, (7 + p) * 16 + i), element(va.k, va.type, (3 + p) * 16 + i));
      }
      for (int i = 0; i < 8; ++i) {
        ASSERT_EQ(element(vb.v, vb.type, (7 + p) * 8 + i), element(va.v, va.type, (3 + p) * 8 + i));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvCache, KvCacheTypes,
                         ::testing::Values(GgmlType::kF16, GgmlType::kF32),
                         [](const ::testing::TestParamInfo<GgmlType>& p) {
                           return std::string(worker::kv_type_name(p.param));
                         });

TEST(KvCache, BadShapesAreRefused) {
  KvCacheShape s = shape(GgmlType::kF16, 0);
  EXPECT_EQ(KvCache::create(s).status().code(), absl::StatusCode::kInvalidArgument);
  s = shape(GgmlType::kQ4_0, 16);
  absl::Status q = KvCache::create(s).status();
  EXPECT_EQ(q.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(q.message().find("not supported"), std::string_view::npos) << q;
  s = shape(GgmlType::kF32, 1 << 24);
  s.n_layer = 4096;  // 4096 layers x 2^24 positions x 24 floats: over 1 TiB
  absl::Status big = KvCache::create(s).status();
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("over 1 TiB"), std::string_view::npos) << big;
}

// Pages of [p, p + bytes) resident in memory; -1 when any is not mapped.
int64_t resident_pages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const size_t n = (reinterpret_cast<uintptr_t>(p) + bytes - begin + page - 1) / page;
  std::vector<unsigned char> in(n);
  if (mincore(reinterpret_cast<void*>(begin), n * page, in.data()) != 0) {
    return errno == ENOMEM ? -1 : -2;
  }
  int64_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  return resident;
}

TEST(KvCache, UntouchedRowsAreNotResidentAndNothingStaysAfterIt) {
  // 3 layers x 2^16 positions x 16 f16 keys: 2 MiB of keys a layer.
  const KvCacheShape s = shape(GgmlType::kF16, 1 << 16);
  const size_t k_bytes = size_t{1} << 21, v_bytes = size_t{1} << 20;
  // Twice: a heap block, once freed, would stay mapped (and its pages
  // resident) for the allocator's reuse the second time round.
  for (int round = 0; round < 2; ++round) {
    const void* k0 = nullptr;
    {
      auto made = KvCache::create(s);
      ASSERT_TRUE(made.ok()) << made.status();
      KvCache& cache = **made;
      EXPECT_EQ(cache.reserved_bytes(), 3 * int64_t{1 << 16} * (16 + 8) * 2);
      for (int l = 0; l < 3; ++l) {
        EXPECT_EQ(resident_pages(cache.view(l, 0).k, k_bytes), 0) << round << " " << l;
        EXPECT_EQ(resident_pages(cache.view(l, 0).v, v_bytes), 0) << round << " " << l;
      }
      for (int l = 0; l < 3; ++l) store_rows(cache, l, 0, 100);  // 3,200 bytes of keys
      cache.advance(100);
      for (int l = 0; l < 3; ++l) {
        // The rows written and nothing far past them (a huge page would be
        // the whole 2 MiB; a few pages of slack).
        const int64_t k_pages = resident_pages(cache.view(l, 0).k, k_bytes);
        EXPECT_GE(k_pages, 1) << round << " " << l;
        EXPECT_LE(k_pages, 16) << round << " " << l;
        EXPECT_LE(resident_pages(cache.view(l, 0).v, v_bytes), 16) << round << " " << l;
      }
      k0 = cache.view(0, 0).k;
    }
    // The mapping is gone: an unmapped range answers -1, unless another
    // mapping took the addresses meanwhile (nothing else runs here).
    EXPECT_EQ(resident_pages(k0, k_bytes), -1) << round;
  }
}

}  // namespace
}  // namespace strata::worker_test
