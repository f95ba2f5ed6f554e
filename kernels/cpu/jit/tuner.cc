#include "kernels/cpu/jit/tuner.h"

#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/env_switch.h"
#include "kernels/cpu/reference/dequantize.h"
#include "kernels/cpu/reference/ops/matmul.h"

namespace strata::kernels::jit {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// Seconds per run of fn: the best of at least 3 runs and `min_total` seconds
// of runs (at most `max_runs`), each run preceded by before() (untimed).
template <typename Fn, typename Before>
double time_runs(const Fn& fn, const Before& before, int max_runs, double min_total) {
  fn();  // warm-up (code, activations)
  double best = 1e30;
  double total = 0.0;
  for (int i = 0; i < max_runs && (i < 3 || total < min_total); ++i) {
    before();
    const Clock::time_point t0 = Clock::now();
    fn();
    const double s = seconds_since(t0);
    best = std::min(best, s);
    total += s;
  }
  return best;
}

// Flushes the packed planes of `m` out of every cache level, so that a
// decode run reads its weights from memory as a real decode step does
// (a model's weights exceed the caches; a matrix timed warm does not).
void evict(const JitMatmul& m) {
  const PackedWeights& pw = m.packed();
  const PackedLayout& l = pw.layout();
  auto flush = [](const void* p, int64_t bytes) {
    if (p == nullptr) return;
    const char* c = static_cast<const char*>(p);
    for (int64_t i = 0; i < bytes; i += 64) _mm_clflush(c + i);
  };
  flush(pw.values(), value_plane_bytes(l));
  flush(pw.hbits(), hbit_plane_bytes(l));
  flush(pw.scales(), scale_plane_bytes(l));
  flush(pw.mins(), min_plane_bytes(l));
  _mm_mfence();
}

// The reference outputs and tolerances a candidate must meet.
struct Oracle {
  std::vector<float> x;     // [rows][n_in]
  std::vector<float> want;  // [rows][n_out]
  std::vector<double> tol;  // [rows][n_out]
  int64_t rows = 0;
};

Oracle make_oracle(const WeightMatrix& w, int64_t rows,
                   ThreadPool& pool, std::mt19937& rng) {
  Oracle o;
  o.rows = rows;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  o.x.resize(static_cast<size_t>(rows * w.n_in));
  for (float& v : o.x) v = dist(rng);
  o.want.resize(static_cast<size_t>(rows * w.n_out));
  reference::ops::MatmulScratch scratch(rows, w.n_in, pool.size());
  reference::ops::matmul(w, o.x.data(), rows, o.want.data(), scratch, pool);
  o.tol.assign(o.want.size(), 0.0);
  std::vector<float> row(static_cast<size_t>(w.n_in));
  for (int64_t r = 0; r < w.n_out; ++r) {
    if (!reference::dequantize_row(w.type, w.data + r * w.row_bytes, w.n_in,
                                   row.data())
             .ok()) {
      continue;
    }
    for (int64_t t = 0; t < rows; ++t) {
      double mag = 0.0;
      for (int64_t k = 0; k < w.n_in; ++k) {
        mag += std::fabs(double{row[k]} * o.x[t * w.n_in + k]);
      }
      o.tol[t * w.n_out + r] = 1e-5 * mag + 1e-30;
    }
  }
  return o;
}

bool passes(const JitMatmul& m, const Oracle& o, JitScratch& scratch,
            ThreadPool& pool, std::vector<float>& y) {
  const int64_t n_out = m.layout().n_out;
  // All rows at once (prefill tiles), then the first row alone (decode).
  for (int64_t rows : {o.rows, int64_t{1}}) {
    m.run(o.x.data(), rows, y.data(), scratch, pool);
    for (int64_t i = 0; i < rows * n_out; ++i) {
      if (!(std::fabs(double{y[i]} - o.want[i]) <= o.tol[i])) return false;
    }
  }
  return true;
}

}  // namespace

bool tuning_disabled_by_env() {
  return env_switch("STRATA_NO_TUNE") == true;
}

Tuner::Tuner(IsaTier tier, int n_threads, TuneOptions options)
    : tier_(tier), n_threads_(n_threads), options_(std::move(options)) {
  if (options_.cache_dir.empty()) {
    const char* home = std::getenv("HOME");
    options_.cache_dir =
        absl::StrCat(home != nullptr ? home : ".", "/.cache/strata/tune-cache");
  }
  path_ = absl::StrCat(options_.cache_dir, "/", sanitize(cpu_signature()),
                       "-", isa_name(tier_), "-g", kGeneratorVersion, ".txt");
  load();
}

void Tuner::load() {
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string op, type_name;
    int64_t n_in, n_out;
    int threads;
    KernelParams p;
    if (!(s >> op >> type_name >> n_in >> n_out >> threads >> p.rows >>
          p.cols >> p.decode_rows >> p.unroll >> p.prefetch >> p.act_block >>
          p.row_grain >> p.few_cols) ||
        op != "matmul") {
      continue;
    }
    const std::optional<GgmlType> type = ggml_type_from_name(type_name);
    if (!type) continue;
    entries_[Key{static_cast<int>(*type), n_in, n_out, threads}] = p;
  }
}

absl::Status Tuner::save() const {
  if (!dirty_) return absl::OkStatus();
  std::error_code ec;
  std::filesystem::create_directories(options_.cache_dir, ec);
  // One temporary file per process: processes tuning at once (parallel
  // tests, several workers) each rename a whole file over the cache.
  const std::string tmp = absl::StrCat(path_, ".", getpid(), ".tmp");
  {
    std::ofstream out(tmp);
    for (const auto& [key, p] : entries_) {
      const auto [type, n_in, n_out, threads] = key;
      out << "matmul "
          << std::string(ggml_type_info(static_cast<GgmlType>(type)).name)
          << ' ' << n_in << ' ' << n_out << ' ' << threads << ' ' << p.rows
          << ' ' << p.cols << ' ' << p.decode_rows << ' ' << p.unroll << ' '
          << p.prefetch << ' ' << p.act_block << ' ' << p.row_grain << ' '
          << p.few_cols << '\n';
    }
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return absl::UnavailableError(
          absl::StrCat("tune cache ", tmp, ": cannot write"));
    }
  }
  std::filesystem::rename(tmp, path_, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);  // leave no partial file behind
    return absl::UnavailableError(absl::StrCat("tune cache ", path_, ": ", why));
  }
  return absl::OkStatus();
}

std::string Tuner::summary() const {
  std::string s = absl::StrCat("tuned ", measured_, " matmul shapes in ",
                               std::round(seconds_ * 10) / 10, " s (", from_cache_,
                               " from the cache, ", reused_,
                               " repeated shapes, ", over_budget_,
                               " over the budget kept defaults");
  if (oversubscribed_ > 0) {
    absl::StrAppend(&s, ", ", oversubscribed_,
                    " kept defaults: more threads than CPUs");
  }
  absl::StrAppend(&s, "); cache ", path_);
  return s;
}

absl::Status Tuner::tune(JitMatmul& m, const WeightMatrix& w,
                         JitScratch& scratch, ThreadPool& pool) {
  const PackedLayout& l = m.layout();
  const Key key{static_cast<int>(l.type), l.n_in, l.n_out, n_threads_};
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (m.set_params(it->second).ok()) {
      ++(tuned_here_.count(key) > 0 ? reused_ : from_cache_);
      return absl::OkStatus();
    }
  }
  const KernelParams defaults = default_params(l.type, m.tier());
  // Timings taken with more threads than CPUs measure the scheduler, not
  // the kernel: keep the defaults and write nothing.
  if (pool.oversubscribed()) {
    ++oversubscribed_;
    return m.set_params(defaults);
  }
  if (seconds_ >= options_.budget_s) {
    ++over_budget_;
    return m.set_params(defaults);
  }
  const Clock::time_point t0 = Clock::now();
  std::mt19937 rng(static_cast<unsigned>(l.n_in * 31 + l.n_out));
  const int64_t check_rows = std::min<int64_t>(3, scratch.max_rows());
  const Oracle oracle = make_oracle(w, check_rows, pool, rng);
  // Prefill timing rows: fewer for very large matrices (the head).
  int64_t pf_rows = std::min<int64_t>(options_.prefill_rows, scratch.max_rows());
  while (pf_rows > 4 && pf_rows * l.n_in * l.n_out > int64_t{1} << 31) pf_rows /= 2;
  std::vector<float> x(static_cast<size_t>(pf_rows * l.n_in));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(std::max(pf_rows, check_rows) * l.n_out));

  // Prefill is timed warm (compute-bound); decode with the weights evicted
  // before each run, as a real decode step reads them from memory.
  auto time_prefill = [&] {
    return time_runs([&] { m.run(x.data(), pf_rows, y.data(), scratch, pool); },
                     [] {}, 50, 0.01);
  };
  auto time_decode = [&] {
    return time_runs([&] { m.run(x.data(), 1, y.data(), scratch, pool); },
                     [&] { evict(m); }, 30, 0.005);
  };
  // A decode step of 8 sequences, its weights from memory as decode's.
  const int64_t few_rows = std::min<int64_t>({8, pf_rows, scratch.max_rows()});
  auto time_few = [&] {
    return time_runs([&] { m.run(x.data(), few_rows, y.data(), scratch, pool); },
                     [&] { evict(m); }, 30, 0.005);
  };
  // Sets p when it is valid and correct; false otherwise.
  auto try_params = [&](const KernelParams& p) {
    return m.set_params(p).ok() && passes(m, oracle, scratch, pool, y);
  };

  absl::Status st = m.set_params(defaults);
  if (!st.ok()) return st;
  KernelParams best = defaults;
  double best_pf = try_params(best) ? time_prefill() : 1e30;
  double best_dec = time_decode();

  // 1. Prefill tile shape (and activation block).
  const bool fl = l.unit_elems == 8;
  // Interleaved: 8-row groups by as many columns as the tier's registers
  // hold, up to 12 (AVX2 3-5, AVX-512 9-13, VNNI 13-14).
  std::vector<std::pair<int, int>> group_tiles;
  if (l.row_group > 1) {
    for (int c : {2, 3, 4, 5, 6, 8, 10, 12}) {
      if (c <= m.max_cols(l.row_group)) group_tiles.emplace_back(l.row_group, c);
    }
  }
  const std::vector<std::pair<int, int>> tiles =
      l.row_group > 1 ? group_tiles
      : fl ? std::vector<std::pair<int, int>>{{4, 3}, {3, 4}, {2, 6}, {6, 2}, {5, 2}}
           : std::vector<std::pair<int, int>>{{4, 2}, {2, 4}, {3, 3}, {2, 5}, {5, 2}, {1, 8}};
  // `p` replaces `best` when it is new, correct and faster by `time`.
  auto consider = [&](const KernelParams& p, const auto& time, double* best_time) {
    if (p == best || !try_params(p)) return;
    const double t = time();
    if (t < *best_time) {
      *best_time = t;
      best = p;
    }
  };
  for (auto [r, c] : tiles) {
    for (int block : {64, 256}) {
      KernelParams p = best;
      p.rows = r;
      p.cols = c;
      p.act_block = block;
      consider(p, time_prefill, &best_pf);
    }
  }
  // 2. Decode rows and prefetch distance.
  const std::vector<int> decode_rows =
      l.row_group > 1 ? std::vector<int>{l.row_group} : std::vector<int>{1, 2, 4};
  for (int dr : decode_rows) {
    // Distances up to 8 KiB: a 16-row group's unit is 256-512 bytes (VNNI).
    for (int pf : {0, 512, 1024, 2048, 4096, 8192}) {
      KernelParams p = best;
      p.decode_rows = dr;
      p.prefetch = pf;
      consider(p, time_decode, &best_dec);
    }
  }
  // 3. Columns of the few-column tiles (2..16 rows, a batched decode step),
  //    with the decode prefetch distance chosen above.
  double best_few = time_few();
  for (int fc : {4, 6, 8, 0}) {
    KernelParams p = best;
    p.few_cols = fc;
    consider(p, time_few, &best_few);
  }
  // 4. Unroll: both kinds of tile, by their summed relative time.
  for (int u : {1, 2, 4}) {
    KernelParams p = best;
    p.unroll = u;
    if (p == best || !try_params(p)) continue;
    const double pf = time_prefill(), dec = time_decode();
    if (pf / best_pf + dec / best_dec < 2.0 * 0.98) {
      best_pf = pf;
      best_dec = dec;
      best = p;
    }
  }
  st = m.set_params(best);
  if (!st.ok()) return st;
  entries_[key] = best;
  tuned_here_.insert(key);
  dirty_ = true;
  ++measured_;
  seconds_ += seconds_since(t0);
  return absl::OkStatus();
}

}  // namespace strata::kernels::jit
