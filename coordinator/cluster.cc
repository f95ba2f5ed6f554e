#include "coordinator/cluster.h"
#include "coordinator/cluster_plan.h"
#include "coordinator/nccl_links.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <future>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/chat_template/chat_template.h"
#include "model/tokenizer/unicode.h"
#include "spdlog/spdlog.h"
#include "worker/kv_cache.h"

namespace strata::coordinator {
namespace {

std::string model_name(const gguf::GgufModel& model, const std::string& path) {
  auto name = model.first().get_string("general.name");
  if (name.ok() && !name->empty()) return *name;
  return std::filesystem::path(path).stem().string();
}

}  // namespace

absl::Status set_chat_template(ServedModel& model, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("chat_template: ", path, ": cannot be read"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat("chat_template: ", path, ": cannot be read"));
  if (auto t = chat_template::ChatTemplate::parse(text); !t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat_template: ", path, ": ", t.status().message()));
  }
  model.chat_template = std::move(text);
  model.chat_template_source = path;
  return absl::OkStatus();
}

absl::Status set_served_model_name(ServedModel& model, const std::string& name) {
  if (name.empty() || name.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("served_model_name: ", name.size(), " bytes; expected 1 .. 256"));
  }
  if (tokenizer::unicode::find_invalid_utf8(name) != std::string_view::npos ||
      std::any_of(name.begin(), name.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    return absl::InvalidArgumentError(
        "served_model_name: not UTF-8 text without control characters");
  }
  model.info.set_name(name);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServedModel>> open_served_model(
    const std::string& path, int context_length, bool need_tokenizer) {
  auto opened = gguf::GgufModel::open(path);
  if (!opened.ok()) return opened.status();
  auto m = std::make_unique<ServedModel>();
  m->gguf = std::shared_ptr<const gguf::GgufModel>(std::move(*opened));
  auto hp = arch::read_hyperparameters(m->gguf->first());
  if (!hp.ok()) return hp.status();
  m->hp = *std::move(hp);
  auto tok = tokenizer::Tokenizer::from_gguf(m->gguf->first());
  if (tok.ok()) {
    m->tokenizer = *std::move(tok);
  } else if (need_tokenizer) {
    return tok.status();
  }
  auto sizes = placement::model_sizes(*m->gguf, m->hp);
  if (!sizes.ok()) return sizes.status();
  m->sizes = *std::move(sizes);
  if (context_length > m->hp.n_ctx_train) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context_length: ", context_length, " exceeds the model's ",
        m->hp.n_ctx_train));
  }
  m->n_ctx = context_length > 0 ? context_length : m->hp.n_ctx_train;
  v1::ModelInfo& info = m->info;
  info.set_name(model_name(*m->gguf, path));
  info.set_path(path);
  info.set_architecture(m->hp.architecture);
  info.set_n_layer(m->hp.n_layer);
  const gguf::TensorInfo* embd = m->gguf->find_tensor("token_embd.weight");
  info.set_n_vocab(m->tokenizer ? m->tokenizer->n_tokens()
                   : embd != nullptr && embd->shape.size() == 2
                       ? static_cast<int32_t>(embd->shape[1])
                       : m->hp.n_vocab);
  info.set_context_length(m->n_ctx);
  return m;
}

Cluster::Cluster(ClusterOptions options, std::unique_ptr<ServedModel> model,
                 std::vector<std::unique_ptr<WorkerControl>> workers,
                 FirstLinkFactory first_link)
    : options_(std::move(options)),
      model_(std::move(model)),
      workers_(std::move(workers)),
      first_link_(std::move(first_link)),
      states_(workers_.size()) {
  pool_ = options_.config.workers;
  pool_.insert(pool_.end(), options_.config.spares.begin(), options_.config.spares.end());
  pool_.resize(workers_.size());  // tests may bring fewer configs: unnamed
  for (size_t i = 0; i < options_.config.workers.size() && i < workers_.size(); ++i) {
    members_.push_back(static_cast<int>(i));
  }
  // Shard ids: nonzero, and different from any earlier coordinator's.
  next_shard_id_ = (std::random_device{}() | 1ull) << 20;
  const ClusterConfig& c = options_.config;
  SchedulerOptions so;
  so.max_sequences = c.max_sequences;
  so.n_ctx = model_->n_ctx;
  so.prefill_chunk = c.prefill_chunk;
  so.prefill_chunk_beside_decode = c.prefill_chunk_beside_decode;
  so.max_batch_rows = c.prefill_chunk + c.max_sequences;
  so.max_in_flight = static_cast<int>(c.workers.size());
  so.max_migrations = c.migration_attempts;
  so.migration_timeout_ms = c.migration_timeout_ms;
  so.trace = !c.trace.empty();
  so.metrics = &metrics_;
  // As vLLM: every sample names the model (dashboards filter on it).
  metrics_.registry().set_constant_labels(
      {{"model_name", model_->info.name()}});
  so.prefix_cache_blocks = prefix_blocks();
  so.prefix_block_tokens = kDefaultPrefixBlockTokens;
  Scheduler::DetokenizerFactory detokenizers = options_.detokenizers;
  if (!detokenizers) {
    const tokenizer::Tokenizer* tok = model_->tokenizer.get();
    detokenizers = [tok] { return make_detokenizer(*tok); };
  }
  scheduler_ = std::make_unique<Scheduler>(
      so, std::move(detokenizers),
      [this](std::span<const uint64_t> ids) { free_sequences(ids); });
  scheduler_->set_on_broken(
      [this](const absl::Status& status) { on_broken(status); });
  if (!c.trace.empty()) {
    trace_out_.open(c.trace, std::ios::out | std::ios::trunc);
    if (!trace_out_) {
      std::fprintf(stderr, "strata: trace: cannot write %s\n",
                   c.trace.c_str());
    }
    scheduler_->set_trace_sink(
        [this](const v1::BlockTrace& t) { write_trace(t); });
  }
  monitor_ = std::thread([this] { monitor_loop(); });
}

Cluster::~Cluster() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  monitor_.join();
  scheduler_.reset();  // ends the requests and closes the link first
}

int Cluster::prefix_blocks() const {
  // Tracing compares every position's block hashes between two runs; a
  // restored position is not computed again, so it has none: off.
  if (!options_.config.trace.empty()) return 0;
  const int blocks = options_.config.prefix_cache_blocks;
  if (blocks >= 0) return blocks;
  return std::max(1, model_->n_ctx / kDefaultPrefixBlockTokens);
}

std::string Cluster::worker_label(int i) const {
  return coordinator::worker_label(pool_[i]);
}

bool Cluster::answers(int i) const {
  return states_[i].misses == 0 && states_[i].last_seen.has_value();
}

bool Cluster::migrating() const {
  return options_.monitor && options_.config.migration_attempts > 0 && ever_served_;
}

absl::Status Cluster::wait_serving(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const bool ok = cv_.wait_for(lock, absl::ToChronoMilliseconds(timeout), [&] {
    return serving_ || permanent_error_ || stop_;
  });
  if (serving_) return absl::OkStatus();
  if (permanent_error_) return absl::FailedPreconditionError(problem_);
  (void)ok;
  return absl::DeadlineExceededError(problem_);
}

void Cluster::free_sequences(std::span<const uint64_t> seq_ids) {
  const uint64_t shard_id = shard_id_.load();
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = members_;
  }
  for (int i : members) {
    auto freed = workers_[i]->free_sequences(shard_id, seq_ids,
                                             absl::Seconds(2));
    if (!freed.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      states_[i].last_error = std::string(freed.status().message());
    }
  }
}

void Cluster::on_broken(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!serving_) return;  // the monitor already knows
    serving_ = false;
    problem_ = std::string(status.message());
    wake_ = true;
  }
  spdlog::warn("pipeline down: {}", std::string(status.message()));
  cv_.notify_all();
  notify_serving();
}

void Cluster::write_trace(const v1::BlockTrace& t) {
  std::lock_guard<std::mutex> lock(trace_mu_);
  if (!trace_out_) return;
  std::string worker;
  for (char c : t.worker()) {
    if (c == '"' || c == '\\') worker += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) worker += c;
  }
  trace_out_ << absl::StrFormat(
      "{\"seq\":%d,\"pos\":%d,\"block\":%d,\"worker\":\"%s\","
      "\"hash\":\"%016x\"}\n",
      t.seq_id(), t.pos(), t.block(), worker, t.hash());
  trace_out_.flush();
}

absl::Status Cluster::plan(bool final_on_failure) {
  const ClusterConfig& c = options_.config;
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = members_;
  }
  std::vector<WorkerFigures> figures;
  for (int i : members) {
    WorkerFigures f;
    f.name = pool_[i].name;
    f.memory_budget = pool_[i].memory_budget;
    // The worker's budget (unless the config gives one), and its measured
    // read bandwidth or its threads: the pace placement balances
    // (placement.h, worker_budgets in cluster_plan.h; `strata plan` plans
    // the same way).
    auto d = workers_[i]->describe(options_.call_deadline);
    if (!d.ok() && options_.monitor) return d.status();
    if (d.ok()) {
      if (f.memory_budget == 0 && options_.monitor) f.memory_budget = d->memory_budget_bytes();
      f.threads = d->threads();
      f.read_bytes_per_s = d->read_bandwidth_bytes_per_s();
      f.flops_per_s = d->flops_per_s();
      f.matmul_overhead_s = d->matmul_overhead_s();
      std::lock_guard<std::mutex> lock(mu_);
      states_[i].described = *d;
    }
    figures.push_back(f);
  }
  const std::vector<placement::WorkerBudget> budgets = worker_budgets(figures);
  placement::KvShape kv;
  kv.n_ctx = model_->n_ctx;
  kv.max_sequences = c.max_sequences;
  kv.kv_type = c.kv_type;
  kv.prefix_positions = int64_t{prefix_blocks()} * kDefaultPrefixBlockTokens;
  absl::StatusOr<std::vector<placement::ShardPlan>> p;
  if (c.explicit_placement && members.size() == c.workers.size()) {
    // Stage k keeps the range of the config's worker k (a spare in its
    // place takes it).
    std::vector<placement::Range> ranges;
    for (const WorkerConfig& w : c.workers) ranges.push_back(*w.blocks);
    p = placement::check_explicit(model_->sizes, kv, budgets, ranges);
  } else {
    p = placement::plan_auto(model_->sizes, kv, budgets);
  }
  if (!p.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    problem_ = std::string(p.status().message());
    if (final_on_failure) {
      permanent_error_ = true;
      cv_.notify_all();
    }
    return p.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = *std::move(p);
  return absl::OkStatus();
}

absl::Status Cluster::load_pipeline() {
  if (!plan_) {
    bool first;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = !ever_served_;
    }
    if (absl::Status st = plan(/*final_on_failure=*/first); !st.ok()) return st;
  }
  const ClusterConfig& c = options_.config;
  const uint64_t shard_id = ++next_shard_id_;
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = members_;
  }
  const int n = static_cast<int>(members.size());
  // Which neighbours NCCL links (Describe says; refused here, before any
  // shard loads, when activation_link: nccl cannot be met).
  absl::StatusOr<std::vector<bool>> nccl = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<StageWorker> stages;
    for (int i : members) {
      stages.push_back({worker_label(i),
                        states_[i].described ? &*states_[i].described : nullptr});
    }
    return choose_nccl_links(c.activation_link, stages);
  }();
  if (!nccl.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    problem_ = std::string(nccl.status().message());
    return nccl.status();
  }
  // The last stage first, so each stage's next one is ready when the first
  // micro-batch comes.
  for (int k = n - 1; k >= 0; --k) {
    const int i = members[k];
    const int next = k + 1 < n ? members[k + 1] : -1;
    const placement::ShardPlan& p = (*plan_)[k];
    v1::LoadShardRequest req;
    req.set_shard_id(shard_id);
    req.set_model_path(model_->info.path());
    req.set_first_block(p.first);
    req.set_last_block(p.last);
    req.set_embedding(p.embedding);
    req.set_head(p.head);
    req.set_n_ctx(model_->n_ctx);
    req.set_max_sequences(c.max_sequences);
    req.set_max_batch_rows(c.prefill_chunk + c.max_sequences);
    req.set_kv_type(worker::kv_type_name(c.kv_type));
    req.set_next_stage(next >= 0 ? workers_[next]->address() : "");
    if (next >= 0 && pool_[next].name != pool_[next].address) {
      req.set_next_stage_name(pool_[next].name);
    }
    req.set_trace(!c.trace.empty());
    req.set_prefix_cache_blocks(prefix_blocks());
    req.set_prefix_block_tokens(kDefaultPrefixBlockTokens);
    {
      std::lock_guard<std::mutex> lock(mu_);
      states_[i].state = "loading";
    }
    auto shard = workers_[i]->load_shard(req, options_.load_deadline);
    std::lock_guard<std::mutex> lock(mu_);
    if (!shard.ok()) {
      states_[i].state = "failed";
      states_[i].last_error = std::string(shard.status().message());
      problem_ = std::string(shard.status().message());  // names the worker
      // Workers in this process (no monitor) read the same file the same
      // way on every retry: the failure is final, and wait_serving says so
      // at once instead of waiting out its timeout.
      if (!options_.monitor) {
        permanent_error_ = true;
        cv_.notify_all();
      }
      return shard.status();
    }
    states_[i].shard = *shard;
    states_[i].state = "serving";
  }
  // Then NCCL between GPU neighbours: ids are made only once every shard
  // loaded (each holds NCCL's bootstrap listener in its worker until both
  // ranks join), so loads that fail and are retried make none.
  std::vector<WorkerControl*> stages;
  for (int i : members) stages.push_back(workers_[i].get());
  absl::StatusOr<std::vector<std::optional<v1::ShardInfo>>> linked =
      link_over_nccl(stages, shard_id, *nccl, options_.call_deadline);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!linked.ok()) {
      problem_ = std::string(linked.status().message());
      return linked.status();
    }
    for (int k = 0; k < n; ++k) {
      if ((*linked)[k]) states_[members[k]].shard = *std::move((*linked)[k]);
    }
  }
  shard_id_.store(shard_id);
  auto link = first_link_(scheduler_->result_callback(shard_id), shard_id, members);
  if (!link.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    problem_ = absl::StrCat(worker_label(members.front()), ": ", link.status().message());
    return link.status();
  }
  {
    // Every stage must hold the slots the index hands out.
    int blocks = prefix_blocks();
    std::lock_guard<std::mutex> lock(mu_);
    for (int i : members) {
      const WorkerState& s = states_[i];
      if (s.shard) blocks = std::min(blocks, s.shard->prefix_cache_blocks());
    }
    scheduler_->set_prefix_cache_blocks(blocks);
    // Prompts cut by the load only where that changes no token.
    std::vector<std::string> backends;
    for (int i : members) {
      const WorkerState& s = states_[i];
      backends.push_back(s.described ? s.described->backend() : "");
    }
    const int beside = prefill_chunk_beside_decode_for(c.prefill_chunk_beside_decode, backends);
    scheduler_->set_prefill_chunk_beside_decode(beside);
    spdlog::info("prompt rows of a micro-batch beside decodes: {} ({})",
                 beside == 0 ? c.prefill_chunk : beside,
                 c.prefill_chunk_beside_decode >= 0 ? "prefill_chunk_beside_decode"
                 : beside > 0 ? "auto: every stage runs on the cpu backend"
                              : "auto: whole chunks, a stage is not on the cpu backend");
  }
  const bool recovering = scheduler_->stats().recovering;
  scheduler_->attach(*std::move(link), shard_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ever_served_ && recovering) ++migrations_;
    serving_ = true;
    ever_served_ = true;
    problem_.clear();
  }
  cv_.notify_all();
  notify_serving();
  return absl::OkStatus();
}

bool Cluster::replace_failed_members() {
  std::vector<int> members;
  std::vector<int> failed;  // stage positions
  std::vector<int> free;    // answering pool entries outside the pipeline
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = members_;
    for (size_t k = 0; k < members.size(); ++k) {
      if (!answers(members[k])) failed.push_back(static_cast<int>(k));
    }
    for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
      if (answers(i) &&
          std::find(members.begin(), members.end(), i) == members.end()) {
        free.push_back(i);
      }
    }
  }
  if (failed.empty()) return false;
  const std::vector<int> before = members;
  if (free.size() >= failed.size()) {
    // Spares (or replaced workers that came back) take the failed places.
    for (size_t j = 0; j < failed.size(); ++j) members[failed[j]] = free[j];
  } else if (!options_.config.explicit_placement) {
    // No spare for every failed worker: the workers left, if they hold the
    // model (the failed one may still come back; then it is a spare).
    std::vector<int> left;
    for (size_t k = 0; k < members.size(); ++k) {
      if (std::find(failed.begin(), failed.end(), static_cast<int>(k)) == failed.end()) {
        left.push_back(members[k]);
      }
    }
    left.insert(left.end(), free.begin(), free.end());
    if (left.empty()) return false;
    members = left;
  } else {
    return false;  // explicit ranges: wait for the worker or a spare
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    members_ = members;
    plan_.reset();
  }
  if (absl::Status st = plan(/*final_on_failure=*/false); !st.ok()) {
    spdlog::warn("no new pipeline without the failed worker: {}", std::string(st.message()));
    std::lock_guard<std::mutex> lock(mu_);
    members_ = before;
    plan_.reset();
    return false;
  }
  std::string names;
  for (int i : members) absl::StrAppend(&names, names.empty() ? "" : ", ", pool_[i].name);
  spdlog::warn("new pipeline: {}", names);
  return true;
}

void Cluster::check_workers() {
  const ClusterConfig& c = options_.config;
  const absl::Duration deadline =
      absl::Milliseconds(c.health_check_timeout_ms);
  std::string failure;
  std::vector<int> members;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = members_;
  }
  // Every worker at once: one that hangs costs one deadline, not one each.
  std::vector<std::future<absl::StatusOr<v1::WorkerHealthResponse>>> answers;
  for (size_t i = 0; i < workers_.size(); ++i) {
    answers.push_back(std::async(std::launch::async, [this, i, deadline] {
      return workers_[i]->health(deadline);
    }));
  }
  for (auto& a : answers) a.wait();
  // The stall watchdog: micro-batches in flight and no answer for half a
  // health check's deadline, read once the checks came back. Then one
  // missed check fails a worker (a hung stage is noticed within interval +
  // timeout), else it takes health_check_failures in a row.
  const Scheduler::Stats stats = scheduler_->stats();
  const bool stalled =
      stats.in_flight > 0 &&
      std::chrono::steady_clock::now() - stats.progress >
          std::chrono::milliseconds(c.health_check_timeout_ms) / 2;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const bool member =
        std::find(members.begin(), members.end(), static_cast<int>(i)) != members.end();
    auto h = answers[i].get();
    std::lock_guard<std::mutex> lock(mu_);
    WorkerState& s = states_[i];
    if (h.ok()) {
      s.misses = 0;
      s.live_sequences = h->live_sequences();
      s.step_seconds = h->step_seconds();
      s.steps = h->steps();
      s.last_seen = absl::Now();
      const bool has_shard = serving_ && h->shard_id() == shard_id_.load();
      if (!member) {
        s.state = "spare";
        s.last_error.clear();
      } else if (serving_ && !has_shard) {
        s.state = h->state();
        s.last_error = "restarted: it lost its shard";
        if (failure.empty()) {
          failure = absl::StrCat(worker_label(static_cast<int>(i)),
                                 " restarted and lost its shard");
        }
      } else if (!serving_) {
        s.state = h->state() == "serving" ? "ready" : h->state();
      } else {
        s.state = "serving";
        s.last_error.clear();
      }
      continue;
    }
    ++s.misses;
    s.last_error = std::string(h.status().message());
    if (s.misses >= c.health_check_failures || !member || (stalled && serving_)) {
      s.state = "unreachable";
      if (member && serving_ && failure.empty()) {
        failure = absl::StrCat(
            worker_label(static_cast<int>(i)), " is unreachable (",
            absl::IsDeadlineExceeded(h.status()) ? "no answer within "
                                                 : "",
            absl::IsDeadlineExceeded(h.status())
                ? absl::StrCat(c.health_check_timeout_ms, " ms")
                : std::string(h.status().message()),
            ")");
      }
    }
  }
  if (!failure.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_ = false;
      problem_ = failure;
    }
    spdlog::warn("{}", failure);
    // With migration the requests wait for the next pipeline.
    scheduler_->suspend(absl::UnavailableError(failure));
    notify_serving();
  }
}

void Cluster::monitor_loop() {
  const ClusterConfig& c = options_.config;
  bool reported = false;
  std::string waiting_reported;  // the workers last named as not answering
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    if (options_.monitor) check_workers();
    bool serving, permanent, migrate;
    bool all_up = true;
    std::string waiting;        // members that do not answer yet
    std::string waiting_why;    // and their last errors
    bool served_before = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      served_before = ever_served_;
      serving = serving_;
      permanent = permanent_error_;
      migrate = migrating();
      for (int i : members_) {
        if (options_.monitor && !answers(i)) {
          all_up = false;
          absl::StrAppend(&waiting, waiting.empty() ? "" : ", ", worker_label(i));
          absl::StrAppend(&waiting_why, "; ",
                          states_[i].last_error.empty() ? worker_label(i)
                                                        : states_[i].last_error);
        }
      }
      // Every load plans again (one Describe per worker): a worker back
      // with another memory budget, or other threads, gets a plan made for
      // it instead of loads it refuses forever.
      if (!serving && all_up && options_.monitor) plan_.reset();
    }
    if (!serving && !permanent && !all_up && migrate) {
      all_up = replace_failed_members();
    }
    // Starting with workers not up yet (their names may not resolve yet, a
    // pod not scheduled): say which and why, once for each change, and
    // keep trying.
    if (!serving && !served_before && !all_up && waiting != waiting_reported) {
      spdlog::warn("waiting for {} to answer (retrying every {} ms){}", waiting,
                   c.health_check_interval_ms, waiting_why);
      waiting_reported = waiting;
    }
    if (!serving && !permanent && all_up) {
      absl::Status st = load_pipeline();
      if (st.ok()) {
        spdlog::info("serving {} on {} worker{}", model_->info.name(),
                     members_.size(), members_.size() == 1 ? "" : "s");
        reported = false;
      } else if (options_.monitor) {  // single-node: wait_serving's caller says it
        // Requests until the next try are refused naming the cause, not
        // with "shards are loading" (a worker may refuse the model for
        // good: a path outside its model_dirs, too little memory). With
        // migration, requests that wait for a new pipeline keep waiting
        // (their own timeout ends them).
        const absl::Status why = absl::UnavailableError(absl::StrCat(
            "starting: shards did not load: ", st.message(), " (retrying every ",
            c.health_check_interval_ms, " ms)"));
        if (migrate) {
          scheduler_->suspend(why);
        } else {
          scheduler_->fail_all(why);
        }
        if (!reported) {
          spdlog::warn("loading shards: {}", std::string(st.message()));
          reported = true;
        }
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(c.health_check_interval_ms),
                 [&] { return stop_ || wake_; });
    wake_ = false;
  }
}

v1::HealthResponse Cluster::health() const {
  const Scheduler::Stats stats = scheduler_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  v1::HealthResponse h;
  if (serving_ && !stats.attached) {
    h.set_state(v1::HealthResponse::DEGRADED);
    h.set_message(stats.unavailable);
  } else if (serving_) {
    h.set_state(v1::HealthResponse::SERVING);
    h.set_message("serving");
  } else {
    h.set_state(ever_served_ ? v1::HealthResponse::DEGRADED
                             : v1::HealthResponse::STARTING);
    h.set_message(problem_);
  }
  return h;
}

int Cluster::add_serving_listener(std::function<void(bool serving)> listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  const int id = next_listener_++;
  listener(health().state() == v1::HealthResponse::SERVING);
  listeners_.emplace(id, std::move(listener));
  return id;
}

void Cluster::remove_serving_listener(int id) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(id);
}

void Cluster::notify_serving() {
  // The state is read under listeners_mu_: of two changes told at once,
  // the later call carries the later state.
  std::lock_guard<std::mutex> lock(listeners_mu_);
  if (listeners_.empty()) return;
  const bool serving = health().state() == v1::HealthResponse::SERVING;
  for (auto& [id, listener] : listeners_) listener(serving);
}

std::string Cluster::render_prometheus() {
  if (!options_.monitor) {
    // Single-node: no health checks run; the stages are in this process,
    // so ask them now.
    for (size_t i = 0; i < workers_.size(); ++i) {
      auto h = workers_[i]->health(options_.call_deadline);
      if (!h.ok()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      states_[i].live_sequences = h->live_sequences();
      states_[i].step_seconds = h->step_seconds();
      states_[i].steps = h->steps();
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < workers_.size(); ++i) {
      const std::string& label = pool_[i].name;
      metrics_.worker_up.with({label}).set(states_[i].state == "serving" ? 1.0
                                                                         : 0.0);
      metrics_.worker_live_sequences.with({label}).set(
          states_[i].live_sequences);
      metrics_.worker_step_seconds.with({label}).set(states_[i].step_seconds,
                                                     states_[i].steps);
    }
  }
  return metrics_.render();
}

v1::ClusterStatusResponse Cluster::status() const {
  const Scheduler::Stats stats = scheduler_->stats();
  v1::ClusterStatusResponse r;
  r.set_state(health().state());
  *r.mutable_model() = model_->info;
  r.set_active_sequences(stats.active);
  r.set_max_sequences(options_.config.max_sequences);
  r.set_requests_served(stats.served);
  r.set_queued_requests(stats.queued);
  r.set_requests_migrated(stats.migrated);
  std::lock_guard<std::mutex> lock(mu_);
  r.set_migrations(migrations_);
  const absl::Time now = absl::Now();
  // The pipeline in stage order, then the spares.
  std::vector<int> order = members_;
  for (int i = 0; i < static_cast<int>(workers_.size()); ++i) {
    if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const int i = order[k];
    const WorkerState& s = states_[i];
    v1::WorkerStatus* w = r.add_workers();
    w->set_address(workers_[i]->address());
    w->set_name(pool_[i].name);
    w->set_state(s.state);
    w->set_spare(k >= members_.size());
    if (plan_ && k < members_.size() && k < plan_->size()) {
      const placement::ShardPlan& p = (*plan_)[k];
      w->set_first_block(p.first);
      w->set_last_block(p.last);
      w->set_embedding(p.embedding);
      w->set_head(p.head);
      w->set_weight_bytes(p.weight_bytes);
      w->set_kv_bytes(p.kv_bytes);
    }
    if (s.shard && k < members_.size()) {
      w->set_weight_bytes(s.shard->weight_bytes());
      w->set_kv_bytes(s.shard->kv_bytes());
      w->set_link_to_next(s.shard->next_link());
    }
    uint64_t budget = pool_[i].memory_budget;
    if (s.described) {
      if (budget == 0) budget = s.described->memory_budget_bytes();
      w->set_device(absl::StrCat(s.described->backend(), " (",
                                 s.described->device(), ", ",
                                 s.described->isa(), ", ",
                                 s.described->threads(), " threads)"));
    }
    w->set_memory_budget_bytes(budget);
    w->set_last_error(s.last_error);
    if (s.last_seen) {
      w->set_last_seen_ms_ago(absl::ToDoubleMilliseconds(now - *s.last_seen));
    }
  }
  return r;
}

}  // namespace strata::coordinator
