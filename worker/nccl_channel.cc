#include "worker/nccl_channel.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
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

// Every live channel's abort flag (see nccl_channel.h, "Failure").
std::mutex& live_mu() {
  static std::mutex mu;
  return mu;
}
std::set<std::atomic<bool>*>& live_flags() {
  static std::set<std::atomic<bool>*> flags;
  return flags;
}
void abort_every_channel() {
  std::lock_guard<std::mutex> lock(live_mu());
  for (std::atomic<bool>* f : live_flags()) f->store(true);
}

// Communicators of this process being joined (initialised and given their
// buffers, which allocate device memory). No channel posts a transfer while
// one is: a transfer waiting on the device (an idle link's receive) could
// keep that allocation from finishing (see nccl_channel.h, "Failure").
std::atomic<int>& joins_in_progress() {
  static std::atomic<int> n{0};
  return n;
}
struct JoinInProgress {
  JoinInProgress() { joins_in_progress().fetch_add(1); }
  ~JoinInProgress() { joins_in_progress().fetch_sub(1); }
  JoinInProgress(const JoinInProgress&) = delete;
  JoinInProgress& operator=(const JoinInProgress&) = delete;
};
// Waits until no join is in progress: Unavailable when `aborted`,
// DeadlineExceeded past `deadline` (asked each poll; may be empty).
absl::Status wait_for_joins(const std::atomic<bool>& aborted,
                            const NcclChannel::DeadlineFn& deadline) {
  while (joins_in_progress().load() > 0) {
    if (aborted.load()) return absl::UnavailableError("aborted");
    if (deadline) {
      if (std::optional<Clock::time_point> d = deadline(); d && Clock::now() > *d) {
        return absl::DeadlineExceededError(
            "waiting for this process's NCCL joins to finish: no end in time");
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return absl::OkStatus();
}

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
    // Frees and aborts on this channel's GPU, whichever thread drops it.
    cudaSetDevice(device);
    abort_comm();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  void abort_comm() {
    if (comm != nullptr && !comm_aborted) {
      abort_every_channel();
      ncclCommAbort(comm);
      comm_aborted = true;
    }
  }

  // Buffers for frames within `limits` (with cols set), once.
  absl::Status size_for(const FrameLimits& limits) {
    if (limits.cols == 0) return absl::OkStatus();
    if (absl::Status s = header.reserve(2 * kFrameHeaderBytes); !s.ok()) return s;
    if (absl::Status s = meta.reserve(size_t{limits.max_meta_bytes} + 1); !s.ok()) return s;
    return payload.reserve(size_t{limits.max_rows} * limits.cols * sizeof(float) + 4);
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
    : impl_(std::move(impl)), nranks_(nranks), rank_(rank), options_(options) {
  std::lock_guard<std::mutex> lock(live_mu());
  live_flags().insert(&aborted_);
}

NcclChannel::~NcclChannel() {
  {
    std::lock_guard<std::mutex> lock(live_mu());
    live_flags().erase(&aborted_);
  }
  impl_.reset();  // aborts the communicator (every channel told first)
}

absl::StatusOr<std::unique_ptr<NcclChannel>> NcclChannel::join(
    const NcclId& id, int nranks, int rank, const NcclChannelOptions& options,
    const std::atomic<bool>* cancel) {
  if (nranks < 1 || nranks > 2 || rank < 0 || rank >= nranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL channel: rank ", rank, " of ", nranks,
                     ": expected 1 or 2 ranks and 0 <= rank < ranks"));
  }
  const JoinInProgress joining;  // until the buffers are sized
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
          cancel != nullptr ? *cancel : never, [deadline] { return deadline; },
          "joining the communicator");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = impl->size_for(options.limits); !s.ok()) return s;
  return std::unique_ptr<NcclChannel>(
      new NcclChannel(std::move(impl), nranks, rank, options));
}

absl::Status NcclChannel::usable(int nranks, const char* call) const {
  // An aborted communicator is gone (ncclCommAbort frees it): no NCCL call
  // may name it again.
  if (aborted_.load() || impl_->comm_aborted) return absl::UnavailableError("aborted");
  if (nranks_ != nranks) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL channel: ", call, " needs a communicator of ", nranks, " rank",
        nranks == 1 ? "" : "s"));
  }
  return absl::OkStatus();
}

absl::StatusOr<FrameHeader> NcclChannel::received_header(const DeadlineFn& bound) {
  std::array<uint8_t, kFrameHeaderBytes> bytes;
  absl::Status s = impl_->copy_out(
      bytes.data(), static_cast<uint8_t*>(impl_->header.ptr) + kFrameHeaderBytes,
      kFrameHeaderBytes);
  if (!s.ok()) return s;
  if (s = impl_->wait(aborted_, bound, "reading a header"); !s.ok()) return s;
  absl::StatusOr<FrameHeader> header = decode_frame_header(bytes);
  if (!header.ok()) return header.status();
  // Before any buffer is sized from it.
  if (s = options_.limits.check(*header); !s.ok()) return s;
  return header;
}

absl::Status NcclChannel::send(const Frame& frame) {
  return send_by(frame, Clock::now() + options_.timeout);
}

absl::Status NcclChannel::send_within(const Frame& frame, std::chrono::milliseconds limit) {
  return send_by(frame, Clock::now() + std::min<std::chrono::milliseconds>(limit, options_.timeout));
}

absl::Status NcclChannel::send_by(const Frame& frame, Clock::time_point deadline) {
  if (absl::Status s = usable(2, "send"); !s.ok()) return s;
  if (absl::Status s = options_.limits.check(frame.header); !s.ok()) return s;
  cudaSetDevice(impl_->device);
  const int peer = 1 - rank_;
  const auto header = encode_frame_header(frame.header);
  const DeadlineFn bound = [deadline] { return deadline; };
  if (absl::Status s = wait_for_joins(aborted_, bound); !s.ok()) return s;
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
  if (absl::Status s = usable(2, "recv"); !s.ok()) return s;
  if (absl::Status s = wait_for_joins(aborted_, deadline); !s.ok()) return s;
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
  const Clock::time_point body_deadline = Clock::now() + options_.timeout;
  const DeadlineFn bound = [body_deadline] { return body_deadline; };
  absl::StatusOr<FrameHeader> header = received_header(bound);
  if (!header.ok()) return header.status();
  absl::Status s;
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
  if (absl::Status s = usable(1, "exchange_with_self"); !s.ok()) return s;
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
  absl::StatusOr<FrameHeader> header = received_header(bound);
  if (!header.ok()) return header.status();
  absl::Status s;
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

class NcclTransport final : public FrameTransport {
 public:
  NcclTransport(int device, std::chrono::milliseconds frame_timeout)
      : device_(device), frame_timeout_(frame_timeout) {}
  const std::string& name() const override { return name_; }
  absl::StatusOr<LinkId> make_id() override { return make_nccl_id(); }
  absl::StatusOr<std::unique_ptr<FrameChannel>> join(
      const LinkId& id, int rank, std::chrono::milliseconds timeout,
      const std::atomic<bool>* cancel, const FrameLimits& limits) override {
    NcclChannelOptions o;
    o.device = device_;
    o.timeout = timeout;
    o.limits = limits;
    // Buffers sized at join: a results channel (no payload) gets a width
    // of 1, which sizes none.
    if (o.limits.cols == 0) o.limits.cols = 1;
    absl::StatusOr<std::unique_ptr<NcclChannel>> ch =
        NcclChannel::join(id, 2, rank, o, cancel);
    if (!ch.ok()) return ch.status();
    (*ch)->set_timeout(frame_timeout_);
    return std::unique_ptr<FrameChannel>(std::move(*ch));
  }

 private:
  const std::string name_ = "nccl";
  const int device_;
  const std::chrono::milliseconds frame_timeout_;
};

}  // namespace

std::shared_ptr<FrameTransport> make_nccl_transport(
    int device, std::chrono::milliseconds frame_timeout) {
  return std::make_shared<NcclTransport>(device, frame_timeout);
}

}  // namespace strata::worker
