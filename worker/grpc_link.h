// The gRPC ActivationLink: a strata.v1.Worker/Activations stream to the
// stage at host:port (the coordinator to the first worker, each worker to
// the next). Micro-batches go out in order; results come back in order on
// the same stream.
//
// Failure (activation_link.h): the link breaks, and every micro-batch sent
// and not answered gets an error result whose message names the peer
// ("worker 127.0.0.1:50062: ..."), when
//   - the stream ends (the peer died, refused the connection, or closed):
//     UNAVAILABLE;
//   - HTTP/2 keepalive pings (the server must allow them:
//     grpc_tls::add_server_limits) go unanswered for keepalive_time +
//     keepalive_timeout (a peer stopped with SIGSTOP, a dead host):
//     UNAVAILABLE;
//   - the oldest unanswered micro-batch waits answer_timeout without any
//     result arriving: DEADLINE_EXCEEDED. (A peer that is busy with a long
//     prefill chunk still answers pings, so answer_timeout must exceed the
//     longest micro-batch of the pipeline behind the peer.)
// Making the link never blocks: the connection is made on the link's
// thread, and a peer that cannot be reached fails the first micro-batch.
//
// Threads: three per link (writer, reader, watchdog; a fourth reads the
// last stage's Results stream when there is one), each asleep when
// idle; the callback runs on the reader thread. send() writes on the
// caller's thread once the stream is made (the writer thread only makes
// the stream and writes what was queued before).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/grpc_tls.h"
#include "worker/activation_link.h"

namespace strata::worker {

struct GrpcLinkOptions {
  std::string peer_name;  // in messages; "" gives "worker ADDRESS"
  // The coordinator's link to the first stage: the last stage's address
  // (and its name in messages, "" gives "worker ADDRESS") to hold a
  // Worker.Results stream to, so that the last stage's results come
  // straight back (a ResultJoin gives the callback one result per
  // micro-batch). Empty: results come back through the chain. When the
  // last stage refuses the stream before it is registered (an older
  // worker), results come back through the chain; when a registered
  // stream ends, the link breaks (UNAVAILABLE naming the last stage).
  std::string results_from;
  std::string results_peer_name;
  uint64_t shard_id = 0;  // the pipeline's shard id (ResultsRequest)
  std::chrono::milliseconds answer_timeout{30000};
  std::chrono::milliseconds keepalive_time{1000};
  std::chrono::milliseconds keepalive_timeout{1000};
  int max_message_bytes = 64 << 20;  // both directions
  // Link security (proto/grpc_tls.h), resolved (resolve_link_security):
  // mutual TLS, or plaintext on loopback only. The default (neither) makes
  // no link. tls_name / results_tls_name: the names the peers'
  // certificates must carry (the workers' `name:`), required with TLS.
  grpc_tls::TlsConfig tls;
  std::string tls_name;
  std::string results_tls_name;
};

// Errors: InvalidArgument for an empty address; the channel's errors
// (grpc_tls::make_channel: no TLS config, no peer name with TLS,
// plaintext to a non-loopback address).
absl::StatusOr<std::unique_ptr<ActivationLink>> make_grpc_link(
    const std::string& address, ActivationLink::ResultCallback on_result,
    const GrpcLinkOptions& options = {});

}  // namespace strata::worker
