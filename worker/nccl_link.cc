#include "worker/nccl_link.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/ordered_results.h"

namespace strata::worker {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes,
              "NcclId must hold an ncclUniqueId");

namespace {

using Clock = std::chrono::steady_clock;

absl::Status cuda_error(const char* what, cudaError_t e) {
  return absl::UnavailableError(
      absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}

absl::Status nccl_error(const char* what, ncclResult_t r, ncclComm_t comm) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return absl::UnavailableError(absl::StrCat(
      "NCCL ", what, ": ", ncclGetErrorString(r),
      last != nullptr && *last != '\0' ? absl::StrCat(" (", last, ")") : ""));
}

// A device buffer that grows to the largest size asked (never shrinks).
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;

  absl::Status reserve(size_t want) {
    if (want <= bytes) return absl::OkStatus();
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
    if (cudaError_t e = cudaMalloc(&ptr, want); e != cudaSuccess) {
      return cuda_error("cudaMalloc", e);
    }
    bytes = want;
    return absl::OkStatus();
  }
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

}  // namespace

absl::StatusOr<NcclId> make_nccl_id() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return nccl_error("ncclGetUniqueId", r, nullptr);
  }
  NcclId out;
  std::memcpy(out.data(), &id, kNcclIdBytes);
  return out;
}

struct NcclChannel::Impl {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  DeviceBuffer header, meta, payload;
  bool comm_aborted = false;

  ~Impl() {
    if (comm != nullptr && !comm_aborted) ncclCommAbort(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  void abort_comm() {
    if (comm != nullptr && !comm_aborted) {
      ncclCommAbort(comm);
      comm_aborted = true;
    }
  }

  // Waits until the communicator's pending calls are issued (a
  // non-blocking communicator answers ncclInProgress until then) and the
  // stream's work is done. `deadline` (may be empty) is asked each poll.
  absl::Status wait(const std::atomic<bool>& aborted,
                    const DeadlineFn& deadline, const char* what) {
    for (;;) {
      ncclResult_t async = ncclSuccess;
      if (ncclResult_t r = ncclCommGetAsyncError(comm, &async);
          r != ncclSuccess) {
        abort_comm();
        return nccl_error("ncclCommGetAsyncError", r, nullptr);
      }
      if (async != ncclSuccess && async != ncclInProgress) {
        const absl::Status s = nccl_error(what, async, comm);
        abort_comm();
        return s;
      }
      if (async == ncclSuccess) {
        const cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) return absl::OkStatus();
        if (q != cudaErrorNotReady) {
          abort_comm();
          return cuda_error(what, q);
        }
      }
      if (aborted.load()) {
        abort_comm();
        return absl::UnavailableError("aborted");
      }
      if (deadline) {
        if (std::optional<Clock::time_point> d = deadline();
            d && Clock::now() > *d) {
          abort_comm();
          return absl::DeadlineExceededError(
              absl::StrCat(what, ": no answer in time"));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // ncclGroupEnd of a non-blocking communicator may answer ncclInProgress:
  // wait() then polls it to completion.
  absl::Status group_end(const char* what) {
    const ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress)
      return nccl_error(what, r, comm);
    return absl::OkStatus();
  }

  absl::Status copy_in(DeviceBuffer& buf, const void* src, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    if (absl::Status s = buf.reserve(bytes); !s.ok()) return s;
    if (cudaError_t e = cudaMemcpyAsync(buf.ptr, src, bytes,
                                        cudaMemcpyHostToDevice, stream);
        e != cudaSuccess) {
      return cuda_error("cudaMemcpyAsync to the device", e);
    }
    return absl::OkStatus();
  }

  absl::Status copy_out(void* dst, const void* dev_src, size_t bytes) {
    if (bytes == 0) return absl::OkStatus();
    if (cudaError_t e = cudaMemcpyAsync(dst, dev_src, bytes,
                                        cudaMemcpyDeviceToHost, stream);
        e != cudaSuccess) {
      return cuda_error("cudaMemcpyAsync to the host", e);
    }
    return absl::OkStatus();
  }

  // Round 1 of a frame: the header, `send` and/or `recv` of 64 bytes.
  absl::Status post_header(const uint8_t* out, int peer, bool send, bool recv) {
    if (absl::Status s = header.reserve(2 * kFrameHeaderBytes); !s.ok())
      return s;
    uint8_t* dev = static_cast<uint8_t*>(header.ptr);
    if (send) {
      if (cudaError_t e = cudaMemcpyAsync(dev, out, kFrameHeaderBytes,
                                          cudaMemcpyHostToDevice, stream);
          e != cudaSuccess) {
        return cuda_error("cudaMemcpyAsync to the device", e);
      }
    }
    ncclGroupStart();
    if (send) ncclSend(dev, kFrameHeaderBytes, ncclUint8, peer, comm, stream);
    if (recv) {
      ncclRecv(dev + kFrameHeaderBytes, kFrameHeaderBytes, ncclUint8, peer,
               comm, stream);
    }
    return group_end("header");
  }

  // Round 2: meta and payload (sizes from the header), sent from
  // `out` and/or received into `in` (sized by the caller).
  absl::Status post_body(const Frame* out, const FrameHeader* in, int peer) {
    // A frame sent and received at once (exchange_with_self) is the same
    // frame: one buffer each for meta and payload would alias, so the
    // receive goes to the upper half.
    const size_t meta_out = out ? out->meta.size() : 0;
    const size_t payload_out = out ? out->payload.size() * sizeof(float) : 0;
    const size_t meta_in = in ? in->meta_bytes : 0;
    const size_t payload_in = in ? in->payload_floats() * sizeof(float) : 0;
    if (absl::Status s = meta.reserve(meta_out + meta_in + 1); !s.ok())
      return s;
    if (absl::Status s = payload.reserve(payload_out + payload_in + 4);
        !s.ok()) {
      return s;
    }
    if (out != nullptr) {
      if (absl::Status s = copy_in(meta, out->meta.data(), meta_out); !s.ok())
        return s;
      if (absl::Status s = copy_in(payload, out->payload.data(), payload_out);
          !s.ok()) {
        return s;
      }
    }
    uint8_t* meta_dev = static_cast<uint8_t*>(meta.ptr);
    uint8_t* payload_dev = static_cast<uint8_t*>(payload.ptr);
    ncclGroupStart();
    if (meta_out > 0)
      ncclSend(meta_dev, meta_out, ncclUint8, peer, comm, stream);
    if (payload_out > 0) {
      ncclSend(payload_dev, payload_out / sizeof(float), ncclFloat32, peer,
               comm, stream);
    }
    if (meta_in > 0) {
      ncclRecv(meta_dev + meta_out, meta_in, ncclUint8, peer, comm, stream);
    }
    if (payload_in > 0) {
      ncclRecv(payload_dev + payload_out, payload_in / sizeof(float),
               ncclFloat32, peer, comm, stream);
    }
    return group_end("meta and payload");
  }

  // After round 2's wait: the received meta and payload to the host.
  absl::Status fetch_body(Frame& f, size_t meta_offset, size_t payload_offset) {
    f.meta.resize(f.header.meta_bytes);
    f.payload.resize(f.header.payload_floats());
    absl::Status s =
        copy_out(f.meta.data(), static_cast<uint8_t*>(meta.ptr) + meta_offset,
                 f.meta.size());
    if (!s.ok()) return s;
    return copy_out(f.payload.data(),
                    static_cast<uint8_t*>(payload.ptr) + payload_offset,
                    f.payload.size() * sizeof(float));
  }
};

NcclChannel::NcclChannel(std::unique_ptr<Impl> impl, int nranks, int rank,
                         const NcclChannelOptions& options)
    : impl_(std::move(impl)), nranks_(nranks), rank_(rank), options_(options) {}

NcclChannel::~NcclChannel() = default;

absl::StatusOr<std::unique_ptr<NcclChannel>> NcclChannel::join(
    const NcclId& id, int nranks, int rank, const NcclChannelOptions& options) {
  if (nranks < 1 || nranks > 2 || rank < 0 || rank >= nranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL channel: rank ", rank, " of ", nranks,
                     ": expected 1 or 2 ranks and 0 <= rank < ranks"));
  }
  auto impl = std::make_unique<Impl>();
  impl->device = options.device;
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    return cuda_error("cudaSetDevice", e);
  }
  if (cudaError_t e =
          cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return cuda_error("cudaStreamCreate", e);
  }
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.data(), kNcclIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r =
      ncclCommInitRankConfig(&impl->comm, nranks, nccl_id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return nccl_error("ncclCommInitRankConfig", r, impl->comm);
  }
  const std::atomic<bool> never{false};
  const Clock::time_point deadline = Clock::now() + options.timeout;
  if (absl::Status s = impl->wait(
          never, [deadline] { return deadline; }, "joining the communicator");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<NcclChannel>(
      new NcclChannel(std::move(impl), nranks, rank, options));
}

absl::Status NcclChannel::send(const Frame& frame) {
  if (nranks_ != 2) {
    return absl::FailedPreconditionError("NCCL channel: send needs two ranks");
  }
  cudaSetDevice(impl_->device);
  const int peer = 1 - rank_;
  const auto header = encode_frame_header(frame.header);
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  const DeadlineFn bound = [deadline] { return deadline; };
  if (absl::Status s = impl_->post_header(header.data(), peer, true, false);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = impl_->wait(aborted_, bound, "sending a header");
      !s.ok()) {
    return s;
  }
  if (frame.meta.empty() && frame.payload.empty()) return absl::OkStatus();
  if (absl::Status s = impl_->post_body(&frame, nullptr, peer); !s.ok())
    return s;
  return impl_->wait(aborted_, bound, "sending meta and payload");
}

absl::StatusOr<Frame> NcclChannel::recv(const DeadlineFn& deadline) {
  if (nranks_ != 2) {
    return absl::FailedPreconditionError("NCCL channel: recv needs two ranks");
  }
  cudaSetDevice(impl_->device);
  const int peer = 1 - rank_;
  if (absl::Status s = impl_->post_header(nullptr, peer, false, true);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = impl_->wait(aborted_, deadline, "waiting for a frame");
      !s.ok()) {
    return s;
  }
  std::array<uint8_t, kFrameHeaderBytes> bytes;
  absl::Status s = impl_->copy_out(
      bytes.data(),
      static_cast<uint8_t*>(impl_->header.ptr) + kFrameHeaderBytes,
      kFrameHeaderBytes);
  if (!s.ok()) return s;
  const Clock::time_point body_deadline = Clock::now() + options_.timeout;
  const DeadlineFn bound = [body_deadline] { return body_deadline; };
  if (s = impl_->wait(aborted_, bound, "reading a header"); !s.ok()) return s;
  absl::StatusOr<FrameHeader> header = decode_frame_header(bytes);
  if (!header.ok()) return header.status();
  Frame f;
  f.header = *header;
  if (f.header.meta_bytes == 0 && f.header.rows == 0) return f;
  if (s = impl_->post_body(nullptr, &f.header, peer); !s.ok()) return s;
  if (s = impl_->wait(aborted_, bound, "receiving meta and payload"); !s.ok())
    return s;
  if (s = impl_->fetch_body(f, 0, 0); !s.ok()) return s;
  if (s = impl_->wait(aborted_, bound, "reading meta and payload"); !s.ok())
    return s;
  return f;
}

absl::StatusOr<Frame> NcclChannel::exchange_with_self(const Frame& frame) {
  if (nranks_ != 1) {
    return absl::FailedPreconditionError(
        "NCCL channel: exchange_with_self needs a one-rank communicator");
  }
  cudaSetDevice(impl_->device);
  const auto out = encode_frame_header(frame.header);
  const Clock::time_point deadline = Clock::now() + options_.timeout;
  const DeadlineFn bound = [deadline] { return deadline; };
  if (absl::Status s = impl_->post_header(out.data(), 0, true, true); !s.ok())
    return s;
  if (absl::Status s = impl_->wait(aborted_, bound, "exchanging a header");
      !s.ok()) {
    return s;
  }
  std::array<uint8_t, kFrameHeaderBytes> bytes;
  absl::Status s = impl_->copy_out(
      bytes.data(),
      static_cast<uint8_t*>(impl_->header.ptr) + kFrameHeaderBytes,
      kFrameHeaderBytes);
  if (!s.ok()) return s;
  if (s = impl_->wait(aborted_, bound, "reading a header"); !s.ok()) return s;
  absl::StatusOr<FrameHeader> header = decode_frame_header(bytes);
  if (!header.ok()) return header.status();
  Frame f;
  f.header = *header;
  if (f.header.meta_bytes == 0 && f.header.rows == 0) return f;
  if (s = impl_->post_body(&frame, &f.header, 0); !s.ok()) return s;
  if (s = impl_->wait(aborted_, bound, "exchanging meta and payload"); !s.ok())
    return s;
  if (s = impl_->fetch_body(f, frame.meta.size(),
                            frame.payload.size() * sizeof(float));
      !s.ok()) {
    return s;
  }
  if (s = impl_->wait(aborted_, bound, "reading meta and payload"); !s.ok())
    return s;
  return f;
}

namespace {

class NcclLink final : public ActivationLink {
 public:
  NcclLink(std::unique_ptr<NcclChannel> forward,
           std::unique_ptr<NcclChannel> results, ResultCallback on_result,
           const NcclLinkOptions& options)
      : peer_(options.peer_name.empty() ? "worker (nccl)" : options.peer_name),
        options_(options),
        forward_(std::move(forward)),
        results_(std::move(results)),
        on_result_(std::move(on_result)),
        writer_([this] { write_loop(); }),
        reader_([this] { read_loop(); }) {}

  ~NcclLink() override { close(kLinkClosed); }

  const std::string& peer() const override { return peer_; }

  absl::Status send(v1::MicroBatch batch) override {
    const uint64_t batch_id = batch.batch_id();
    absl::StatusOr<Frame> frame =
        frame_micro_batch(std::move(batch), options_.n_embd);
    if (!frame.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(peer_, ": ", frame.status().message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_) {
      return absl::UnavailableError(absl::StrCat(peer_, ": ", broken_reason_));
    }
    outbox_.push_back(std::move(*frame));
    pending_.push_back({batch_id, Clock::now()});
    cv_.notify_all();
    return absl::OkStatus();
  }

  bool healthy() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return !broken_;
  }

  void close(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      closing_ = true;
      cv_.notify_all();
    }
    writer_.join();  // sends the close frame unless the link is broken
    results_->abort();
    reader_.join();
    fail_pending(absl::StatusCode::kUnavailable, reason);
  }

 private:
  struct Pending {
    uint64_t batch_id;
    Clock::time_point sent;
  };

  void write_loop() {
    for (;;) {
      Frame frame;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closing_ || broken_ || !outbox_.empty(); });
        if (broken_) return;
        if (outbox_.empty()) break;  // closing, all sent
        frame = std::move(outbox_.front());
        outbox_.pop_front();
      }
      if (absl::Status s = forward_->send(frame); !s.ok()) {
        mark_broken(s);
        return;
      }
    }
    // Tells the far side to stop (best effort: it may be gone).
    (void)forward_->send(close_frame());
  }

  void read_loop() {
    const NcclChannel::DeadlineFn deadline =
        [this]() -> std::optional<Clock::time_point> {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return std::nullopt;
      return pending_.front().sent + options_.answer_timeout;
    };
    for (;;) {
      absl::StatusOr<Frame> frame = results_->recv(deadline);
      if (!frame.ok()) {
        mark_broken(frame.status());
        return;
      }
      if (frame->header.kind == FrameKind::kClose) {
        mark_broken(absl::UnavailableError("the far side closed the link"));
        return;
      }
      absl::StatusOr<v1::MicroBatchResult> result =
          unframe_result(frame->header, frame->meta);
      if (!result.ok()) {
        mark_broken(result.status());
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.empty() ||
            pending_.front().batch_id != result->batch_id()) {
          broken_ = true;
          broken_code_ = absl::StatusCode::kUnavailable;
          broken_reason_ = absl::StrCat(
              "result for batch ", result->batch_id(), ", expected ",
              pending_.empty() ? std::string("none")
                               : absl::StrCat(pending_.front().batch_id));
          cv_.notify_all();
          forward_->abort();
          return;
        }
        pending_.pop_front();
      }
      on_result_(*std::move(result));
    }
  }

  // The link failed: `why` is what its results say, unless close() came
  // first (its own abort then is no failure; close's reason stands).
  void mark_broken(const absl::Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_ || closed_) return;
    broken_ = true;
    broken_code_ = why.code() == absl::StatusCode::kDeadlineExceeded
                       ? absl::StatusCode::kDeadlineExceeded
                       : absl::StatusCode::kUnavailable;
    broken_reason_ = std::string(why.message());
    cv_.notify_all();
    forward_->abort();
    results_->abort();
  }

  // Every micro-batch sent and not answered gets an error result, in order.
  void fail_pending(absl::StatusCode code, const std::string& reason) {
    std::deque<Pending> left;
    std::string why = reason;
    {
      std::lock_guard<std::mutex> lock(mu_);
      left.swap(pending_);
      outbox_.clear();
      if (!broken_reason_.empty()) {
        why = broken_reason_;
        code = broken_code_;
      }
      broken_ = true;
    }
    for (const Pending& p : left) {
      on_result_(error_result(p.batch_id, static_cast<int>(code),
                              absl::StrCat(peer_, ": ", why)));
    }
  }

  const std::string peer_;
  const NcclLinkOptions options_;
  std::unique_ptr<NcclChannel> forward_;
  std::unique_ptr<NcclChannel> results_;
  ResultCallback on_result_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Frame> outbox_;     // framed, not yet sent
  std::deque<Pending> pending_;  // sent (or queued), not answered
  bool closing_ = false;
  bool closed_ = false;
  bool broken_ = false;
  absl::StatusCode broken_code_ = absl::StatusCode::kUnavailable;
  std::string broken_reason_;

  std::thread writer_;
  std::thread reader_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ActivationLink>> make_nccl_link(
    std::unique_ptr<NcclChannel> forward, std::unique_ptr<NcclChannel> results,
    ActivationLink::ResultCallback on_result, const NcclLinkOptions& options) {
  if (forward == nullptr || results == nullptr) {
    return absl::InvalidArgumentError("NCCL link: a channel is missing");
  }
  if (forward->nranks() != 2 || forward->rank() != 0 ||
      results->nranks() != 2 || results->rank() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL link: expected rank 0 of 2 on forward and rank 1 of 2 on "
        "results, got ",
        forward->rank(), " of ", forward->nranks(), " and ", results->rank(),
        " of ", results->nranks()));
  }
  if (options.n_embd == 0) {
    return absl::InvalidArgumentError("NCCL link: n_embd is 0");
  }
  return std::unique_ptr<ActivationLink>(new NcclLink(
      std::move(forward), std::move(results), std::move(on_result), options));
}

absl::StatusOr<v1::MicroBatch> receive_micro_batch(NcclChannel& forward) {
  absl::StatusOr<Frame> frame = forward.recv();
  if (!frame.ok()) return frame.status();
  if (frame->header.kind == FrameKind::kClose) {
    return absl::UnavailableError(kLinkClosed);
  }
  return unframe_micro_batch(frame->header, frame->meta, frame->payload);
}

absl::Status send_result(NcclChannel& results,
                         const v1::MicroBatchResult& result) {
  absl::StatusOr<Frame> frame = frame_result(result);
  if (!frame.ok()) return frame.status();
  return results.send(*frame);
}

}  // namespace strata::worker
