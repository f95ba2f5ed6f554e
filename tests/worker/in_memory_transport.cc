#include "tests/worker/in_memory_transport.h"

#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::worker_test {

using Clock = std::chrono::steady_clock;

// One communicator: each rank's inbox and whether it joined or left.
struct InMemoryTransport::Comm {
  std::shared_ptr<std::atomic<uint64_t>> frames;  // the transport's count
  std::mutex mu;
  std::condition_variable cv;
  bool joined[2] = {false, false};
  bool gone[2] = {false, false};  // aborted or destroyed
  std::deque<Message> inbox[2];
  bool rendezvous = false;          // a send returns once received
  bool silent_aborts = false;       // a rank never hears the other left

  // The other rank of `rank` left, as far as `rank` can tell.
  bool peer_gone(int rank) const { return !silent_aborts && gone[1 - rank]; }
  uint64_t sent[2] = {0, 0};        // messages put in inbox[r]
  uint64_t taken[2] = {0, 0};       // messages taken out of inbox[r]
};

namespace {

class InMemoryChannel final : public worker::FrameChannel {
 public:
  InMemoryChannel(std::shared_ptr<InMemoryTransport::Comm> comm, int rank,
                  const worker::FrameLimits& limits)
      : comm_(std::move(comm)), rank_(rank), limits_(limits) {}
  ~InMemoryChannel() override { leave(); }

  absl::Status send(const worker::Frame& frame) override { return send_by(frame, std::nullopt); }
  absl::Status send_within(const worker::Frame& frame, std::chrono::milliseconds limit) override {
    return send_by(frame, Clock::now() + limit);
  }

  // `until`: when a rendezvous send gives up (none: never).
  absl::Status send_message(InMemoryTransport::Message m,
                            std::optional<Clock::time_point> until = std::nullopt) {
    std::unique_lock<std::mutex> lock(comm_->mu);
    const int peer = 1 - rank_;
    if (aborted_.load() || comm_->gone[rank_]) return absl::UnavailableError("aborted");
    if (comm_->peer_gone(rank_)) {
      return absl::UnavailableError("the other rank left the communicator");
    }
    comm_->inbox[peer].push_back(std::move(m));
    const uint64_t seq = ++comm_->sent[peer];
    comm_->frames->fetch_add(1);
    comm_->cv.notify_all();
    // As an NCCL send: done once the other rank has received it.
    while (comm_->rendezvous && comm_->taken[peer] < seq) {
      if (aborted_.load() || comm_->gone[rank_]) return absl::UnavailableError("aborted");
      if (until && Clock::now() > *until) {
        return absl::DeadlineExceededError("sending a frame: not received in time");
      }
      if (comm_->peer_gone(rank_)) {
        return absl::UnavailableError("the other rank left the communicator");
      }
      comm_->cv.wait_for(lock, std::chrono::milliseconds(2));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<worker::Frame> recv(const DeadlineFn& deadline) override {
    InMemoryTransport::Message m;
    for (;;) {
      // The deadline is asked without the lock (the link's deadline takes
      // its own lock), again each round: it may move.
      const std::optional<Clock::time_point> until = deadline ? deadline() : std::nullopt;
      std::unique_lock<std::mutex> lock(comm_->mu);
      std::deque<InMemoryTransport::Message>& inbox = comm_->inbox[rank_];
      if (aborted_.load() || comm_->gone[rank_]) return absl::UnavailableError("aborted");
      if (!inbox.empty()) {
        m = std::move(inbox.front());
        inbox.pop_front();
        ++comm_->taken[rank_];
        comm_->cv.notify_all();
        break;
      }
      if (comm_->peer_gone(rank_)) {
        return absl::UnavailableError("the other rank left the communicator");
      }
      if (until && Clock::now() > *until) {
        return absl::DeadlineExceededError("waiting for a frame: no answer in time");
      }
      comm_->cv.wait_for(lock, std::chrono::milliseconds(2));
    }
    absl::StatusOr<worker::FrameHeader> header = worker::decode_frame_header(m.header);
    if (!header.ok()) return header.status();
    if (absl::Status st = limits_.check(*header); !st.ok()) return st;
    // NCCL receives exactly the counts the header gives.
    if (m.meta.size() != header->meta_bytes || m.payload.size() != header->payload_floats()) {
      return absl::UnavailableError(absl::StrCat(
          "the frame's meta and payload (", m.meta.size(), " bytes, ", m.payload.size(),
          " floats) differ from its header's"));
    }
    worker::Frame f;
    f.header = *header;
    f.meta = std::move(m.meta);
    f.payload = std::move(m.payload);
    return f;
  }

  void abort() override {
    aborted_.store(true);
    leave();
  }
  bool aborted() const override { return aborted_.load(); }
  int rank() const override { return rank_; }

 private:
  absl::Status send_by(const worker::Frame& frame, std::optional<Clock::time_point> until) {
    if (absl::Status st = limits_.check(frame.header); !st.ok()) return st;
    const auto header = worker::encode_frame_header(frame.header);
    InMemoryTransport::Message m;
    m.header.assign(header.begin(), header.end());
    m.meta = frame.meta;
    m.payload = frame.payload;
    return send_message(std::move(m), until);
  }

  void leave() {
    std::lock_guard<std::mutex> lock(comm_->mu);
    comm_->gone[rank_] = true;
    comm_->cv.notify_all();
  }

  std::shared_ptr<InMemoryTransport::Comm> comm_;
  const int rank_;
  const worker::FrameLimits limits_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

absl::StatusOr<worker::LinkId> InMemoryTransport::make_id() {
  std::lock_guard<std::mutex> lock(mu_);
  worker::LinkId id{};
  const uint64_t n = ++next_;
  for (int i = 0; i < 8; ++i) id[i] = static_cast<uint8_t>(n >> (8 * i));
  // The rest: distinct from one transport to another.
  const uintptr_t self = reinterpret_cast<uintptr_t>(this);
  for (size_t i = 0; i < sizeof(self); ++i) id[8 + i] = static_cast<uint8_t>(self >> (8 * i));
  auto comm = std::make_shared<Comm>();
  comm->frames = counter_;
  comm->rendezvous = rendezvous_.load();
  comm->silent_aborts = silent_aborts_.load();
  comms_[id] = std::move(comm);
  return id;
}

void InMemoryTransport::break_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, comm] : comms_) {
    std::lock_guard<std::mutex> comm_lock(comm->mu);
    comm->gone[0] = comm->gone[1] = true;
    comm->cv.notify_all();
  }
}

int InMemoryTransport::made() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(comms_.size());
}

bool InMemoryTransport::left(const worker::LinkId& id, int rank) {
  std::shared_ptr<Comm> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(id);
    if (it == comms_.end() || (rank != 0 && rank != 1)) return false;
    comm = it->second;
  }
  std::lock_guard<std::mutex> lock(comm->mu);
  return comm->gone[rank];
}

int InMemoryTransport::joined(const worker::LinkId& id) {
  std::shared_ptr<Comm> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(id);
    if (it == comms_.end()) return 0;
    comm = it->second;
  }
  std::lock_guard<std::mutex> lock(comm->mu);
  return int{comm->joined[0]} + int{comm->joined[1]};
}

absl::StatusOr<std::unique_ptr<worker::FrameChannel>> InMemoryTransport::join(
    const worker::LinkId& id, int rank, std::chrono::milliseconds timeout,
    const std::atomic<bool>* cancel, const worker::FrameLimits& limits) {
  if (rank != 0 && rank != 1) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of 2"));
  }
  std::shared_ptr<Comm> comm;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(id);
    if (it == comms_.end()) {
      return absl::UnavailableError("no communicator has this id (no bootstrap to reach)");
    }
    comm = it->second;
  }
  const Clock::time_point until = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(comm->mu);
  if (comm->joined[rank]) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " joined twice"));
  }
  comm->joined[rank] = true;
  comm->cv.notify_all();
  while (!comm->joined[1 - rank]) {
    // A rank that gave up is gone: the other one's waits fail.
    if (cancel != nullptr && cancel->load()) {
      comm->gone[rank] = true;
      return absl::UnavailableError("aborted");
    }
    if (Clock::now() > until) {
      comm->gone[rank] = true;
      return absl::DeadlineExceededError("joining the communicator: no answer in time");
    }
    comm->cv.wait_for(lock, std::chrono::milliseconds(2));
  }
  lock.unlock();
  return std::unique_ptr<worker::FrameChannel>(new InMemoryChannel(std::move(comm), rank, limits));
}

absl::Status send_raw(worker::FrameChannel& channel, InMemoryTransport::Message message) {
  return static_cast<InMemoryChannel&>(channel).send_message(std::move(message));
}

}  // namespace strata::worker_test
