#include "worker/worker_service.h"

#include <malloc.h>

#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/cpu/cpu_info.h"
#include "proto/decode.h"  // before any Read of a MicroBatch: see decode.h
#include "spdlog/spdlog.h"
#include "worker/frame_link.h"
#include "worker/grpc_link.h"
#include "worker/shard_plan.h"
#include "worker/stream_writer.h"

namespace strata::worker {

namespace {

constexpr uint32_t kProtocolVersion = 1;
constexpr int kMaxFreeIds = 1024;
// Results one Activations stream may owe its peer (accepted micro-batches
// not yet answered): the coordinator keeps one micro-batch in flight per
// stage, so this is far above any legitimate stream.
constexpr size_t kMaxOutstandingResults = 256;

std::string gib(uint64_t bytes) {
  return absl::StrFormat(
      "%.2f GiB",
      static_cast<double>(bytes) / static_cast<double>(uint64_t{1} << 30));
}

std::string isa_tier(const cpu::CpuInfo& info) {
  if (info.has("avx512f") && info.has("avx512_vnni")) return "avx512vnni";
  if (info.has("avx512f") && info.has("avx512bw")) return "avx512";
  if (info.has("avx2") && info.has("fma")) return "avx2";
  return "baseline";
}

// realpath(3); "" when it does not resolve.
std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return "";
  return buf;
}

}  // namespace

namespace {
// threads 0 (auto): the CPUs this process may use.
WorkerConfig with_threads(WorkerConfig config) {
  if (config.threads == 0) config.threads = cpu::usable_threads();
  return config;
}
}  // namespace

WorkerService::WorkerService(WorkerConfig config)
    : config_(with_threads(std::move(config))),
      worker_id_(config_.name.empty() ? config_.listen : config_.name) {
  const cpu::CpuInfo info = cpu::read_cpu_info();
  device_ = info.model.empty() ? "cpu" : info.model;
  isa_ = isa_tier(info);
  watchdog_ = std::thread([this] { watch_writers(); });
}

WorkerService::~WorkerService() {
  shutdown();
  {
    std::lock_guard<std::mutex> lock(writers_mu_);
    writers_stop_ = true;
  }
  writers_cv_.notify_all();
  watchdog_.join();
}

void WorkerService::watch(const std::shared_ptr<StreamWriter>& writer) {
  std::lock_guard<std::mutex> lock(writers_mu_);
  writers_.push_back(writer);
}

WorkerService::StreamStats WorkerService::stream_stats() const {
  return StreamStats{cut_.load(), max_owed_.load()};
}

void WorkerService::count_owed(size_t owed) {
  size_t seen = max_owed_.load(std::memory_order_relaxed);
  while (owed > seen && !max_owed_.compare_exchange_weak(seen, owed)) {
  }
}

void WorkerService::watch_writers() {
  const std::chrono::milliseconds stall(config_.answer_timeout_ms);
  std::unique_lock<std::mutex> lock(writers_mu_);
  while (!writers_stop_) {
    // A poll: a Write that blocks cannot wake anyone. A tenth of the
    // stall bound (at most 100 ms) keeps the cut within 10% of it.
    writers_cv_.wait_for(lock, std::min(std::chrono::milliseconds(100),
                                        stall / 10 + std::chrono::milliseconds(1)));
    const auto now = StreamWriter::Clock::now();
    lock.unlock();
    trim_when_idle(now);
    lock.lock();
    for (size_t i = 0; i < writers_.size();) {
      std::shared_ptr<StreamWriter> w = writers_[i].lock();
      if (w == nullptr) {
        writers_[i] = std::move(writers_.back());
        writers_.pop_back();
        continue;
      }
      if (w->cancel_if_stalled(now, stall)) ++cut_;
      if (w->failed()) {  // cut, or its peer went away
        writers_[i] = std::move(writers_.back());
        writers_.pop_back();
        continue;
      }
      ++i;
    }
  }
}

// After a burst, the freed heap goes back to the system once the shard has
// been idle a second (glibc keeps it otherwise, in every thread's arena:
// bench/soak measured workers idle at +40 MiB after 64 streams, and at the
// warm-up figure less 70 MiB once trimmed).
void WorkerService::trim_when_idle(std::chrono::steady_clock::time_point now) {
  uint64_t steps = 0;
  {
    // Never wait here: this thread also cuts stalled writes, and a call
    // may hold mu_ while one waits.
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    if (loaded_ != nullptr) steps = loaded_->relay->step_totals().steps();
  }
  if (steps != idle_steps_) {
    idle_steps_ = steps;
    idle_since_ = now;
    trimmed_ = false;
  } else if (!trimmed_ && now - idle_since_ >= std::chrono::seconds(1)) {
    malloc_trim(0);
    trimmed_ = true;
  }
}

void WorkerService::set_bound_address(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  if (config_.name.empty()) worker_id_ = address;
}

std::string WorkerService::worker_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return worker_id_;
}

void WorkerService::set_on_shard(std::function<void(bool loaded)> on_shard) {
  std::lock_guard<std::mutex> lock(mu_);
  on_shard_ = std::move(on_shard);
}

void WorkerService::tell_shard() {
  std::function<void(bool)> on_shard;
  bool loaded = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    on_shard = on_shard_;
    loaded = loaded_ != nullptr;
  }
  if (on_shard) on_shard(loaded);
}

void WorkerService::shutdown() {
  std::shared_ptr<Loaded> old;
  std::unique_ptr<FrameUpstream> upstream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(loaded_);
    if (old != nullptr) upstream = std::move(old->upstream);  // set under mu_
    state_ = "idle";
    stopping_ = true;
  }
  if (upstream != nullptr) upstream->close();
  if (old != nullptr) {
    old->relay->close(absl::StrCat("link closed: worker ", worker_id(), " is stopping"));
  }
  tell_shard();
}

absl::Status WorkerService::no_shard(const std::string& message) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError(absl::StrCat("worker ", worker_id_, " is stopping"));
  return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id_, ": ", message));
}

std::shared_ptr<WorkerService::Loaded> WorkerService::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loaded_;
}

grpc::Status WorkerService::Describe(grpc::ServerContext*,
                                     const v1::DescribeRequest*,
                                     v1::DescribeResponse* response) {
  response->set_worker_id(worker_id());
  response->set_backend(config_.backend);
  response->set_device(device_);
  response->set_isa(isa_);
  response->set_threads(config_.threads);
  response->set_memory_budget_bytes(config_.memory_budget_bytes);
  for (const std::string& d : config_.model_dirs) response->add_model_dirs(d);
  response->set_protocol_version(kProtocolVersion);
  response->set_nccl_link(transport_ != nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    response->set_gpu_uuid(gpu_uuid_);
  }
  response->set_read_bandwidth_bytes_per_s(read_bytes_per_s_.load());
  response->set_flops_per_s(flops_per_s_.load());
  response->set_matmul_overhead_s(matmul_overhead_s_.load());
  {
    std::lock_guard<std::mutex> lock(read_rates_mu_);
    for (const v1::ReadRate& r : read_rates_) *response->add_read_rates() = r;
  }
  if (std::shared_ptr<Loaded> loaded = current()) {
    *response->mutable_shard() = shard_of(*loaded);
  }
  return grpc::Status::OK;
}

absl::StatusOr<std::string> WorkerService::resolve_model_path(
    const std::string& path) const {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (!path.empty() && path[0] == '/') {
    candidates.push_back(path);
  } else {
    for (const std::string& d : config_.model_dirs) {
      candidates.push_back(absl::StrCat(d, "/", path));
    }
  }
  const std::string dirs = absl::StrJoin(config_.model_dirs, ", ");
  // Whether `p` lies under directory `dir` (both absolute and normal).
  const auto under = [](const std::string& p, const std::string& dir) {
    return p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 &&
           (dir == "/" || p[dir.size()] == '/');
  };
  // One answer for every path outside the model directories, whether it
  // exists or not: the worker must not tell a caller which files exist
  // elsewhere on its disk. Outside is decided on the path's text first
  // (nothing outside is looked up), then on where its symlinks lead.
  const absl::Status outside = absl::PermissionDeniedError(absl::StrCat(
      "model_path: ", path, " is outside the model directories [", dirs, "]"));
  // Each model directory as written (normalised) and where it leads.
  std::vector<std::pair<std::string, std::string>> model_dirs;
  for (const std::string& d : config_.model_dirs) {
    model_dirs.emplace_back(fs::path(d).lexically_normal().string(), real_path(d));
  }
  bool any_inside = false;
  for (const std::string& c : candidates) {
    const std::string lexical = fs::path(c).lexically_normal().string();
    bool inside = false;
    for (const auto& [dir, real_dir] : model_dirs) {
      if (lexical == dir || (!real_dir.empty() && lexical == real_dir) ||
          under(lexical, dir) || (!real_dir.empty() && under(lexical, real_dir))) {
        inside = true;
        break;
      }
    }
    if (!inside) continue;
    any_inside = true;
    const std::string resolved = real_path(c);
    if (resolved.empty()) continue;
    for (const auto& [unused, dir] : model_dirs) {
      if (dir.empty()) continue;
      if (resolved == dir) {  // ".", "" or the directory's own path
        return absl::InvalidArgumentError(absl::StrCat(
            "model_path: ", path, " is the model directory ", dir, ", not a file"));
      }
      if (under(resolved, dir)) {
        struct stat st {};
        if (::stat(resolved.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
          return absl::InvalidArgumentError(
              absl::StrCat("model_path: ", path, " is not a regular file"));
        }
        return resolved;
      }
    }
    return outside;  // a symlink inside that leads out
  }
  if (!any_inside) return outside;
  return absl::NotFoundError(
      absl::StrCat("model_path: ", path, " does not exist in [", dirs, "]"));
}

void WorkerService::log_absent_parts(const ShardPlan& plan) const {
  const std::vector<std::string>& absent = plan.model->absent_parts();
  if (absent.empty()) return;
  spdlog::info("worker {}: split model: {} of {} parts on this disk; absent: {}", worker_id(),
               plan.model->parts().size() - absent.size(), plan.model->parts().size(),
               absl::StrJoin(absent, ", "));
  // A tensor in an absent part cannot be told from one the model lacks: a
  // separate head there would be taken for a head tied to the embedding.
  if (plan.info.head() && plan.model->find_tensor("output.weight") == nullptr) {
    spdlog::warn(
        "worker {}: no output.weight in the parts on this disk: the head is the tied "
        "token_embd.weight; if the model has a separate output.weight, copy its part",
        worker_id());
  }
}

absl::StatusOr<v1::ShardInfo> WorkerService::load(
    const v1::LoadShardRequest& request) {
  if (absl::Status st = check_load_request(request); !st.ok()) return st;
  absl::StatusOr<std::string> path = resolve_model_path(request.model_path());
  if (!path.ok()) return path.status();
  v1::LoadShardRequest resolved = request;
  resolved.set_model_path(*path);
  absl::StatusOr<ShardPlan> plan = plan_shard(resolved);
  if (!plan.ok()) return plan.status();
  log_absent_parts(*plan);

  const v1::ShardInfo& info = plan->info;
  uint64_t need = 0;
  if (__builtin_add_overflow(info.weight_bytes(), info.kv_bytes(), &need)) {
    need = UINT64_MAX;
  }
  if (need > config_.memory_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "blocks [", info.first_block(), ", ", info.last_block(), ") of ", *path,
        " need ", info.weight_bytes(), " bytes of weights + ", info.kv_bytes(),
        " bytes of KV cache (", info.max_sequences(), " sequences x ",
        info.n_ctx(), " positions",
        info.prefix_cache_blocks() > 0
            ? absl::StrCat(" + a prefix cache of ", info.prefix_cache_blocks(), " x ",
                           info.prefix_block_tokens(), " positions")
            : "",
        ") = ", need, " (", gib(need),
        "), over the memory budget of ", config_.memory_budget_bytes, " (",
        gib(config_.memory_budget_bytes), ")"));
  }
  // A full micro-batch: rows of f32 activations plus their tokens (at most
  // 5 bytes each) and per-slice fields, with 1 MiB of slack.
  const int64_t message =
      int64_t{info.max_batch_rows()} * (int64_t{info.n_embd()} * 4 + 16) +
      (int64_t{1} << 20);
  if (message > config_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_rows: ", info.max_batch_rows(), " rows of n_embd ",
        info.n_embd(), " need micro-batches of up to ", message,
        " bytes, over max_message_bytes ", config_.max_message_bytes,
        " of worker ", worker_id()));
  }

  // A second shard under the live one's id would take micro-batches meant
  // for it (the coordinator makes a new id for every load; Health shows
  // the live one to anyone).
  if (std::shared_ptr<Loaded> live = current();
      live != nullptr && live->stage->shard().shard_id() == request.shard_id()) {
    return absl::AlreadyExistsError(absl::StrCat(
        "shard_id: ", request.shard_id(),
        " is the loaded shard's; a new shard needs a new shard_id"));
  }

  // Free the old shard before the new one takes memory.
  std::shared_ptr<Loaded> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(loaded_);
    state_ = "loading";
  }
  if (old != nullptr) {
    if (old->upstream != nullptr) old->upstream->close();
    old->relay->close();  // waits for a running micro-batch
    old.reset();
    // Give the old shard's heap pages back to the system (glibc keeps
    // freed memory otherwise: bench/soak saw RSS grow ~100 MiB a reload).
    malloc_trim(0);
  }
  StageOptions options;
  options.worker_name = worker_id();
  options.progress = progress_;
  const bool head = info.head();
  const std::string next = info.next_stage();
  const std::string next_label =
      request.next_stage_name().empty()
          ? ""
          : absl::StrCat("worker ", request.next_stage_name(), " (", next, ")");
  plan->info.set_next_link(head ? "" : "grpc");  // LinkNccl may change it
  absl::StatusOr<std::unique_ptr<Stage>> stage =
      load_planned_stage(std::move(*plan), config_.threads, options, config_.backend);
  if (!stage.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = "idle";
    return stage.status();
  }
  LinkFactory make_next;
  if (!head) {
    GrpcLinkOptions link_options;
    link_options.answer_timeout =
        std::chrono::milliseconds(config_.answer_timeout_ms);
    link_options.max_message_bytes =
        static_cast<int>(config_.max_message_bytes);
    link_options.peer_name = next_label;
    // mTLS: the next stage's certificate must carry the name the
    // coordinator's plan gives it.
    link_options.tls = config_.tls;
    link_options.tls_name = request.next_stage_name();
    make_next = [next, link_options](ActivationLink::ResultCallback cb) {
      return make_grpc_link(next, std::move(cb), link_options);
    };
  }
  auto loaded = std::make_shared<Loaded>();
  loaded->next_label = next_label.empty() ? absl::StrCat("worker ", next) : next_label;
  loaded->stage = std::move(*stage);
  loaded->relay = std::make_unique<StageRelay>(
      *loaded->stage, absl::StrCat("worker ", worker_id()),
      std::move(make_next));
  loaded->relay->connect();
  v1::ShardInfo out = loaded->stage->shard();
  {
    std::lock_guard<std::mutex> lock(mu_);
    loaded_ = std::move(loaded);
    state_ = "serving";
  }
  return out;
}

grpc::Status WorkerService::LoadShard(grpc::ServerContext*,
                                      const v1::LoadShardRequest* request,
                                      v1::LoadShardResponse* response) {
  std::lock_guard<std::mutex> lock(load_mu_);
  absl::StatusOr<v1::ShardInfo> info = load(*request);
  tell_shard();
  if (info.ok()) {
    spdlog::info("worker {}: loaded shard {:x}: blocks [{}, {}){}{}",
                 worker_id(), info->shard_id(), info->first_block(),
                 info->last_block(), info->embedding() ? ", embedding" : "",
                 info->head() ? ", head" : "");
  } else {
    spdlog::warn("worker {}: LoadShard refused: {}", worker_id(),
                 std::string(info.status().message()));
  }
  if (!info.ok()) {
    return to_grpc_status(absl::Status(
        info.status().code(),
        absl::StrCat("worker ", worker_id(), ": ", info.status().message())));
  }
  *response->mutable_shard() = std::move(*info);
  return grpc::Status::OK;
}

absl::Status WorkerService::take_nccl_ids(const v1::LinkNcclRequest& request) {
  // The ids this worker is rank 0 of: its own MakeNcclId made them.
  std::vector<std::pair<const char*, const std::string*>> own;
  if (request.has_next()) own.emplace_back("next.forward_id", &request.next().forward_id());
  if (request.has_previous()) {
    own.emplace_back("previous.results_id", &request.previous().results_id());
  }
  if (own.size() == 2 && *own[0].second == *own[1].second) {
    return absl::InvalidArgumentError(
        "next.forward_id and previous.results_id: one id for two communicators");
  }
  const auto same = [](const LinkId& id, const std::string& bytes) {
    return bytes.size() == id.size() && std::memcmp(id.data(), bytes.data(), id.size()) == 0;
  };
  std::lock_guard<std::mutex> lock(ids_mu_);
  // (No structured bindings: clang 14 cannot capture them.)
  for (const auto& entry : own) {
    const std::string& bytes = *entry.second;
    if (std::none_of(made_ids_.begin(), made_ids_.end(),
                     [&](const LinkId& id) { return same(id, bytes); })) {
      return absl::InvalidArgumentError(absl::StrCat(
          entry.first, ": not an id this worker's MakeNcclId made, or one a LinkNccl already "
                       "used (this worker is rank 0 of that communicator)"));
    }
  }
  // Both found: take them out, each by value.
  for (const auto& entry : own) {
    const std::string& bytes = *entry.second;
    made_ids_.erase(std::find_if(made_ids_.begin(), made_ids_.end(),
                                 [&](const LinkId& id) { return same(id, bytes); }));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ShardInfo> WorkerService::link_nccl(const v1::LinkNcclRequest& request) {
  if (transport_ == nullptr) {
    return absl::FailedPreconditionError(
        "this worker makes no NCCL links (it needs a build with NCCL and a cuda backend; "
        "Describe says nccl_link: false)");
  }
  std::shared_ptr<Loaded> loaded = current();
  if (loaded == nullptr) return no_shard("no shard loaded (LoadShard first)");
  const v1::ShardInfo& info = loaded->stage->shard();
  if (absl::Status st = check_link_nccl(request, info); !st.ok()) return st;
  bool has_upstream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    has_upstream = loaded->upstream != nullptr;
  }
  if ((request.has_next() && loaded->next_over_nccl) ||
      (request.has_previous() && has_upstream)) {
    return absl::FailedPreconditionError(absl::StrCat(
        request.has_next() && loaded->next_over_nccl ? "next" : "previous",
        ": shard ", info.shard_id(),
        " is linked over NCCL already (ids serve one join: a new shard links again)"));
  }
  if (absl::Status st = take_nccl_ids(request); !st.ok()) return st;
  const auto ids_of = [](const v1::NcclLinkSetup& setup) {
    FrameLinkIds ids;
    std::memcpy(ids.forward.data(), setup.forward_id().data(), kNcclIdBytes);
    std::memcpy(ids.results.data(), setup.results_id().data(), kNcclIdBytes);
    return ids;
  };
  const std::chrono::milliseconds timeout(config_.answer_timeout_ms);
  if (request.has_previous()) {
    FrameUpstreamOptions options;
    options.label = absl::StrCat("worker ", worker_id(), ": link from the previous stage (",
                                 transport_->name(), ")");
    options.max_owed = kMaxOutstandingResults;
    options.join_timeout = timeout;
    options.n_embd = static_cast<uint32_t>(info.n_embd());
    options.max_rows = static_cast<uint32_t>(info.max_batch_rows());
    auto upstream = std::make_unique<FrameUpstream>(transport_, ids_of(request.previous()),
                                                    *loaded->relay, std::move(options));
    std::lock_guard<std::mutex> lock(mu_);
    if (loaded_ != loaded) {  // shutdown() took the shard meanwhile
      return absl::UnavailableError(absl::StrCat("worker ", worker_id_, " is stopping"));
    }
    loaded->upstream = std::move(upstream);
  }
  if (request.has_next()) {
    FrameLinkOptions options;
    options.peer_name = absl::StrCat(loaded->next_label, " (", transport_->name(), ")");
    options.n_embd = static_cast<uint32_t>(info.n_embd());
    options.max_rows = static_cast<uint32_t>(info.max_batch_rows());
    options.answer_timeout = timeout;
    options.join_timeout = timeout;
    // A communicator's id serves one join: once that link breaks, the
    // coordinator loads the pipeline again and links it with new ids.
    auto made = std::make_shared<std::atomic<bool>>(false);
    const FrameLinkIds ids = ids_of(request.next());
    absl::Status st = loaded->relay->relink(
        [transport = transport_, ids, options,
         made](ActivationLink::ResultCallback cb) -> absl::StatusOr<std::unique_ptr<ActivationLink>> {
          if (made->exchange(true)) {
            return absl::UnavailableError(absl::StrCat(
                options.peer_name,
                ": the NCCL link broke and its ids are spent (the coordinator loads the "
                "pipeline again)"));
          }
          return make_frame_link(transport, ids, std::move(cb), options);
        });
    if (!st.ok()) return st;
    loaded->next_over_nccl = true;
  }
  return shard_of(*loaded);
}

v1::ShardInfo WorkerService::shard_of(const Loaded& loaded) {
  v1::ShardInfo out = loaded.stage->shard();  // next_link "grpc" (or "": the last)
  if (loaded.next_over_nccl) out.set_next_link("nccl");
  return out;
}

grpc::Status WorkerService::LinkNccl(grpc::ServerContext*, const v1::LinkNcclRequest* request,
                                     v1::LinkNcclResponse* response) {
  std::lock_guard<std::mutex> lock(load_mu_);  // not beside a LoadShard
  absl::StatusOr<v1::ShardInfo> shard = link_nccl(*request);
  if (!shard.ok()) {
    spdlog::warn("worker {}: LinkNccl refused: {}", worker_id(),
                 std::string(shard.status().message()));
    return to_grpc_status(absl::Status(
        shard.status().code(),
        absl::StrCat("worker ", worker_id(), ": ", shard.status().message())));
  }
  spdlog::info("worker {}: shard {:x} linked over NCCL:{}{}", worker_id(), shard->shard_id(),
               request->has_previous() ? " from the previous stage" : "",
               request->has_next() ? " to the next stage" : "");
  *response->mutable_shard() = *std::move(shard);
  return grpc::Status::OK;
}

grpc::Status WorkerService::MakeNcclId(grpc::ServerContext*, const v1::MakeNcclIdRequest*,
                                       v1::MakeNcclIdResponse* response) {
  if (transport_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("worker ", worker_id(),
                                     ": makes no NCCL links (it needs a build with NCCL and a "
                                     "cuda backend)"));
  }
  absl::StatusOr<LinkId> id = transport_->make_id();
  if (!id.ok()) {
    return to_grpc_status(absl::Status(
        id.status().code(), absl::StrCat("worker ", worker_id(), ": MakeNcclId: ",
                                         id.status().message())));
  }
  {
    std::lock_guard<std::mutex> lock(ids_mu_);
    made_ids_.push_back(*id);
    while (made_ids_.size() > kMaxMadeIds) made_ids_.pop_front();
  }
  response->set_id(std::string(id->begin(), id->end()));
  return grpc::Status::OK;
}

grpc::Status WorkerService::Activations(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::MicroBatchResult, v1::MicroBatch>* stream) {
  auto writer = std::make_shared<StreamWriter>(
      [stream](const v1::MicroBatchResult& r) { return stream->Write(r); },
      [context] { context->TryCancel(); },
      absl::StrCat("worker ", worker_id(), ": Activations stream from ", context->peer()));
  watch(writer);
  auto results = std::make_shared<OrderedResults>(
      [writer](v1::MicroBatchResult r) { (void)writer->write(r); });

  v1::MicroBatch batch;
  (void)proto_decode::take_last_error();
  std::string undecodable;  // why the peer's last message did not decode
  while (!writer->failed()) {
    if (!stream->Read(&batch)) {
      undecodable = proto_decode::take_last_error();
      break;
    }
    // A peer that sends and never reads: its results pile up behind a
    // Write that does not return (the watchdog cuts that too, later).
    const size_t owed = results->outstanding();
    count_owed(owed);
    if (owed >= kMaxOutstandingResults) {
      writer->overflow(absl::StrCat(owed, " results owed to the peer reach the bound of ",
                                    kMaxOutstandingResults));
      ++cut_;
      break;
    }
    std::shared_ptr<Loaded> loaded = current();
    if (loaded == nullptr) {
      const absl::Status why = no_shard("no shard loaded (LoadShard first)");
      const uint64_t ticket = results->reserve();
      results->complete(ticket, error_result(batch.batch_id(), static_cast<int>(why.code()),
                                             std::string(why.message())));
      continue;
    }
    loaded->relay->process(results, batch);
  }
  // The upstream sent its last micro-batch: write the results still owed
  // (the next stage answers or is declared dead within its timeouts),
  // unless the upstream went away or was cut.
  while (!context->IsCancelled() && !writer->failed() && results->outstanding() > 0) {
    writer->wait_a_while();
  }
  writer->close();
  const absl::Status st = writer->status();
  if (!st.ok()) {
    spdlog::warn("{}", std::string(st.message()));
    return to_grpc_status(st);
  }
  if (!undecodable.empty()) {  // the stream ends there: say why
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("worker ", worker_id(), ": ", undecodable));
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Results(grpc::ServerContext* context,
                                    const v1::ResultsRequest* request,
                                    grpc::ServerWriter<v1::MicroBatchResult>* writer) {
  std::shared_ptr<Loaded> loaded = current();
  if (loaded == nullptr) {
    return to_grpc_status(no_shard("no shard loaded (LoadShard first)"));
  }
  const v1::ShardInfo& info = loaded->stage->shard();
  if (request->shard_id() != info.shard_id()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("worker ", worker_id(), ": shard_id: ", request->shard_id(),
                                     ", but the loaded shard is ", info.shard_id()));
  }
  if (!info.head()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("worker ", worker_id(),
                                     ": not the last stage (its shard has no head)"));
  }
  // The stage's thread writes each result (the sink); this thread only
  // watches for the end: the client gone or cut (StreamWriter), the shard
  // unloaded, another subscriber.
  auto out = std::make_shared<StreamWriter>(
      [writer](const v1::MicroBatchResult& r) { return writer->Write(r); },
      [context] { context->TryCancel(); },
      absl::StrCat("worker ", worker_id(), ": Results stream to ", context->peer()));
  watch(out);
  // The first message says the sink is registered: the sink is set first,
  // and its writes wait (on `hello`) until that message is written.
  auto hello = std::make_shared<std::mutex>();
  std::unique_lock<std::mutex> hello_lock(*hello);
  const uint64_t token = loaded->relay->set_direct_sink(
      [out, hello](const v1::MicroBatchResult& r) {
        std::lock_guard<std::mutex> after_hello(*hello);
        return out->write(r);
      });
  const bool registered = out->write(v1::MicroBatchResult());
  hello_lock.unlock();
  if (!registered) {
    loaded->relay->clear_direct_sink(token);
    out->close();
    return grpc::Status::OK;
  }
  bool replaced = false;
  for (;;) {
    if (!loaded->relay->has_direct_sink(token)) {
      replaced = true;
      break;
    }
    if (current() != loaded) break;  // unloaded or replaced by LoadShard
    if (out->failed() || context->IsCancelled()) break;
    out->wait_a_while();
  }
  loaded->relay->clear_direct_sink(token);
  out->close();  // no write after this
  if (absl::Status st = out->status(); !st.ok()) {
    spdlog::warn("{}", std::string(st.message()));
    return to_grpc_status(st);
  }
  if (replaced) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "another Results stream took over");
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::FreeSequence(grpc::ServerContext*,
                                         const v1::FreeSequenceRequest* request,
                                         v1::FreeSequenceResponse* response) {
  std::shared_ptr<Loaded> loaded = current();
  if (loaded == nullptr) {
    return to_grpc_status(no_shard("no shard loaded"));
  }
  if (request->shard_id() != loaded->stage->shard().shard_id()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("worker ", worker_id(),
                                     ": shard_id: ", request->shard_id(),
                                     ", but the loaded shard is ",
                                     loaded->stage->shard().shard_id()));
  }
  if (request->seq_ids_size() > kMaxFreeIds) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("worker ", worker_id(),
                                     ": seq_ids: ", request->seq_ids_size(),
                                     " exceed ", kMaxFreeIds));
  }
  response->set_freed(loaded->relay->free_sequences(request->seq_ids().data(),
                                                    request->seq_ids_size()));
  return grpc::Status::OK;
}

grpc::Status WorkerService::Health(grpc::ServerContext*,
                                   const v1::WorkerHealthRequest*,
                                   v1::WorkerHealthResponse* response) {
  std::shared_ptr<Loaded> loaded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    loaded = loaded_;
    response->set_state(state_);
  }
  if (loaded != nullptr) {
    response->set_shard_id(loaded->stage->shard().shard_id());
    response->set_live_sequences(loaded->relay->live_sequences());
    response->set_step_seconds(loaded->relay->step_totals().seconds());
    response->set_steps(loaded->relay->step_totals().steps());
  }
  return grpc::Status::OK;
}

}  // namespace strata::worker
