// libFuzzer target: activation frames (strata.v1.MicroBatch) from a hostile
// peer, through StageRelay::process, the entry the worker's Activations
// stream calls for each micro-batch it reads (worker/worker_service.cc).
//
// Input: one byte of flags, then up to 8 micro-batches, each a 2-byte
// little-endian length and a serialized MicroBatch (the last may run to the
// end without its length; one that does not parse ends the input), sent in
// order on one stream, so that later ones may continue the sequences that
// earlier ones started.
//   bit 0   0: the first stage, blocks [0, 2) of stories260K, whose output
//           goes over an in-process link to a stage of blocks [2, 5) (the
//           path of a middle worker relaying to the next);
//           1: a last stage, blocks [2, 5) with the head, alone.
//   bit 1   keep the inputs' shard_id (else it is set to the loaded one, so
//           that the input reaches the checks behind it).
//   bit 2   last stage: cut or pad `hidden` to rows x n_embd x 4 bytes, so
//           that arbitrary floats (NaN, infinities) reach the blocks.
// After each input the sequences it named are freed (no other sequence may
// be live: a rejected micro-batch changes nothing), and a good micro-batch
// (BOS + "Once upon a time", greedy) must still give the token computed at
// startup, on both paths. The stages are loaded again after an input that
// saved prefix blocks, so that every input starts from the same state.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "model/architecture/architecture.h"
#include "model/gguf_reader.h"
#include "strata/v1/worker.pb.h"
#include "tests/fuzz/fuzz_proto.h"
#include "tests/fuzz/fuzz_util.h"
#include "worker/in_process_link.h"
#include "worker/ordered_results.h"
#include "worker/stage.h"
#include "worker/stage_relay.h"

namespace {

using namespace strata;  // NOLINT: a test harness
using fuzz::check;
using fuzz::require;

constexpr uint64_t kShardId = 0x5eed;
constexpr int kCut = 2;
constexpr uint64_t kGoodSeq = 0xC0FFEE;

v1::LoadShardRequest shard_request(int first, int last, int n_layer) {
  v1::LoadShardRequest r;
  r.set_shard_id(kShardId);
  r.set_model_path(fuzz::stories_path());
  r.set_first_block(first);
  r.set_last_block(last);
  r.set_embedding(first == 0);
  r.set_head(last == n_layer);
  r.set_n_ctx(64);
  r.set_max_sequences(4);
  r.set_max_batch_rows(32);
  r.set_prefix_cache_blocks(4);
  r.set_prefix_block_tokens(4);
  r.set_trace(true);
  if (last != n_layer) r.set_next_stage("127.0.0.1:1");  // unused: in-process
  return r;
}

std::unique_ptr<worker::Stage> load(int first, int last, int n_layer, const char* name) {
  auto stage = worker::load_stage(shard_request(first, last, n_layer), 1, {name});
  require(stage.ok(), std::string(name) + ": " + stage.status().ToString());
  return std::move(*stage);
}

// Results of one upstream, collected in order.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::MicroBatchResult> results;

  std::shared_ptr<worker::OrderedResults> upstream() {
    return std::make_shared<worker::OrderedResults>([this](v1::MicroBatchResult r) {
      std::lock_guard<std::mutex> lock(mu);
      results.push_back(std::move(r));
      cv.notify_all();
    });
  }
  // Waits for `n` results (the in-process stage answers on its thread).
  std::vector<v1::MicroBatchResult> wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    const bool all = cv.wait_for(lock, std::chrono::seconds(30),
                                 [&] { return results.size() >= n; });
    check(all, "every micro-batch is answered");
    check(results.size() == n, "one result per micro-batch");
    std::vector<v1::MicroBatchResult> out;
    out.swap(results);
    return out;
  }
};

struct World {
  int n_layer = 0;
  int n_embd = 0;
  std::unique_ptr<worker::Stage> first;       // [0, kCut), embedding
  std::unique_ptr<worker::Stage> chain_last;  // [kCut, n), behind `first`
  std::unique_ptr<worker::Stage> last;        // [kCut, n), alone
  std::unique_ptr<worker::StageRelay> first_relay;
  std::unique_ptr<worker::StageRelay> last_relay;
  std::string good_hidden;  // first stage's output for the good prompt
  int32_t good_token = -1;  // the greedy token after it
};

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};

v1::MicroBatch good_batch(bool with_hidden, const World& w) {
  v1::MicroBatch b;
  b.set_shard_id(kShardId);
  b.set_batch_id(424242);
  v1::SequenceSlice* s = b.add_slices();
  s->set_seq_id(kGoodSeq);
  s->set_start_pos(0);
  for (int32_t t : kPrompt) s->add_tokens(t);
  s->set_sample(true);
  if (with_hidden) b.set_hidden(w.good_hidden);
  return b;
}

// Loads the stages and their relays (again: a fresh block store).
void build(World& w) {
  w.first_relay.reset();  // relays first: they borrow the stages
  w.last_relay.reset();
  w.first = load(0, kCut, w.n_layer, "first");
  w.chain_last = load(kCut, w.n_layer, w.n_layer, "chain_last");
  w.last = load(kCut, w.n_layer, w.n_layer, "last");
  worker::Stage* chain_last = w.chain_last.get();
  w.first_relay = std::make_unique<worker::StageRelay>(
      *w.first, "worker first",
      [chain_last](worker::ActivationLink::ResultCallback cb)
          -> absl::StatusOr<std::unique_ptr<worker::ActivationLink>> {
        worker::InProcessLinkOptions options;
        options.name = "stage 1";
        return worker::make_in_process_link(*chain_last, {}, std::move(cb), options);
      });
  w.last_relay =
      std::make_unique<worker::StageRelay>(*w.last, "worker last", worker::LinkFactory());
}

World& world() {
  static World* world_ = [] {
    auto* w = new World();
    auto model = gguf::GgufModel::open(fuzz::stories_path());
    require(model.ok(), fuzz::stories_path() + ": " + model.status().ToString());
    auto hp = arch::read_hyperparameters((*model)->first());
    require(hp.ok(), "stories260K hyperparameters");
    w->n_layer = hp->n_layer;
    w->n_embd = hp->n_embd;

    // The expected answer, from stages run directly.
    auto first = load(0, kCut, w->n_layer, "first");
    auto last = load(kCut, w->n_layer, w->n_layer, "last");
    v1::MicroBatch next;
    v1::MicroBatchResult result;
    require(first->run(good_batch(false, *w), &next, &result).ok(), "good batch, first");
    w->good_hidden = next.hidden();
    require(last->run(next, &next, &result).ok(), "good batch, last");
    require(result.tokens_size() == 1 && result.tokens(0).error_code() == 0, "good token");
    w->good_token = result.tokens(0).id();
    build(*w);
    return w;
  }();
  return *world_;
}

// Runs `batch` on one path; its result.
v1::MicroBatchResult run(worker::StageRelay& relay, const v1::MicroBatch& batch) {
  Collector collector;
  relay.process(collector.upstream(), batch);
  std::vector<v1::MicroBatchResult> r = collector.wait(1);
  return r[0];
}

void expect_good(World& w, bool last_alone) {
  const v1::MicroBatchResult r =
      run(last_alone ? *w.last_relay : *w.first_relay, good_batch(last_alone, w));
  check(r.error_code() == 0, "the good micro-batch succeeds after a hostile one");
  check(r.batch_id() == 424242, "batch_id echoed");
  check(r.tokens_size() == 1, "one token for the good slice");
  check(r.tokens(0).error_code() == 0, "the good slice samples");
  check(r.tokens(0).id() == w.good_token, "the good slice's greedy token is unchanged");
  const uint64_t seq = kGoodSeq;
  if (last_alone) {
    check(w.last_relay->free_sequences(&seq, 1) == 1, "good sequence freed (last)");
  } else {
    check(w.first_relay->free_sequences(&seq, 1) == 1, "good sequence freed (first)");
    check(w.chain_last->free_sequences(&seq, 1) == 1, "good sequence freed (chain)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::quiet_protobuf();
  World& w = world();
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const bool last_alone = (flags & 1) != 0;
  worker::StageRelay& relay = last_alone ? *w.last_relay : *w.first_relay;

  std::set<uint64_t> named;  // every seq_id sent
  bool saved = false;        // a slice asked to save prefix blocks
  size_t at = 1;
  for (int i = 0; i < 8 && at < size; ++i) {
    size_t n = size - at;
    if (n >= 2) {
      const size_t len = data[at] | (size_t{data[at + 1]} << 8);
      if (len <= n - 2) {
        at += 2;
        n = len;
      }
    }
    v1::MicroBatch batch;
    const bool parsed = batch.ParseFromArray(data + at, static_cast<int>(n));
    at += n;
    if (!parsed) break;
    if ((flags & 2) == 0) batch.set_shard_id(kShardId);
    if (last_alone && (flags & 4) != 0) {
      size_t rows = 0;
      for (const auto& s : batch.slices()) rows += static_cast<size_t>(s.tokens_size());
      if (rows <= 4096) {
        std::string hidden = batch.hidden();
        hidden.resize(rows * static_cast<size_t>(w.n_embd) * 4, '\x3c');
        batch.set_hidden(std::move(hidden));
      }
    }
    for (const auto& s : batch.slices()) {
      named.insert(s.seq_id());
      saved = saved || s.save_blocks_size() > 0;
    }

    const v1::MicroBatchResult r = run(relay, batch);
    fuzz::note(r.error_code() != 0 ? r.error_message()
                                   : "ok, " + std::to_string(r.tokens_size()) + " tokens" +
                                         (r.tokens_size() > 0 && r.tokens(0).error_code() != 0
                                              ? ": " + r.tokens(0).error_message()
                                              : ""));
    check(r.batch_id() == batch.batch_id(), "batch_id echoed");
    if (r.error_code() != 0) {
      check(!r.error_message().empty(), "an error says why");
      check(r.tokens_size() == 0, "no tokens with an error");
    }
  }

  // Free what the input made live; nothing else may be.
  const std::vector<uint64_t> ids(named.begin(), named.end());
  for (size_t i = 0; i < ids.size(); i += 256) {
    const int n = static_cast<int>(std::min<size_t>(256, ids.size() - i));
    if (last_alone) {
      w.last_relay->free_sequences(ids.data() + i, n);
    } else {
      w.first_relay->free_sequences(ids.data() + i, n);
      w.chain_last->free_sequences(ids.data() + i, n);
    }
  }
  check(w.first->live_sequences() == 0 && w.chain_last->live_sequences() == 0 &&
            w.last->live_sequences() == 0,
        "no sequence outlives its micro-batch's free");

  expect_good(w, last_alone);
  if (saved) build(w);
  return 0;
}
