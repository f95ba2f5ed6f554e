#!/usr/bin/env python3
"""The public API's own limits against `strata serve` (--setup serve) or a
strata-coordinator with 2 workers (--setup cluster), SmolLM2 on 127.0.0.1:

- a 14.65 MiB chat request over gRPC (each field under its own 4 MiB bound)
  is refused before rendering: INVALID_ARGUMENT naming the request's total
  and the bound; the server's CPU time and wall time for it are printed;
  the same over HTTP (a body under the 8 MiB body limit) is a 400;
- requests that do not decode (invalid UTF-8 in `prompt`, in
  messages[0].content or in Tokenize's `text`; bytes that are not protobuf),
  sent as hand-built bytes: INVALID_ARGUMENT naming the field, not INTERNAL
  with an empty message; an HTTP body with invalid UTF-8 is a 400;
- a client with keepalive pings every 1 s keeps its connection;
- ClusterStatus shows the requests waiting for a slot (queued_requests) and
  each worker's name (cluster);
- with an API key (serve), every strata.v1.Inference call but Health needs
  the bearer token, as HTTP does.

Exit status: 0 passed, 1 failed, 77 skipped (model or grpcio absent).
"""
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_test import error_of, parse_args_or_skip, raw, run_setup, start_serve  # noqa: E402
from cluster_test import Failures, load_stubs  # noqa: E402

MIB = 1 << 20
CTX = 1024  # http_test's context: the text bound is then 1 MiB


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field, by hand."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def check_limits(f, server, stubs, label, metadata=None):
    pb, pb_grpc, grpc = stubs
    channel = grpc.insecure_channel(server.address, options=[
        ("grpc.max_send_message_length", 32 * MIB)])
    stub = pb_grpc.InferenceStub(channel)

    # 14.65 MiB of chat: three 4 MiB messages and one of 2.65 MiB.
    sizes = [4 * MIB, 4 * MIB, 4 * MIB, int(2.65 * MIB)]
    req = pb.GenerateRequest(max_tokens=1)
    for n in sizes:
        req.messages.messages.add(role="user", content="a" * n)
    total = sum(sizes) + 4 * len("user")
    cpu0, t0, rss0 = cpu_seconds(server.p.pid), time.monotonic(), rss_mib(server.p.pid)
    try:
        list(stub.Generate(req, timeout=300, metadata=metadata))
        f.check(False, f"{label}: a 14.65 MiB chat request is refused")
    except grpc.RpcError as e:
        wall = time.monotonic() - t0
        cpu = cpu_seconds(server.p.pid) - cpu0
        rss = rss_mib(server.p.pid)
        want = (f"request: {total} bytes of text exceed {MIB}, the bound for a context of "
                f"{CTX} tokens (largest field: messages.messages[0].content, {4 * MIB} bytes)")
        f.check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() == want,
                f"{label}: a 14.65 MiB chat request -> INVALID_ARGUMENT: {e.code()} {e.details()!r}")
        print(f"measured {label}: 14.65 MiB gRPC chat request refused in {wall:.3f} s wall, "
              f"{cpu:.3f} s of server CPU, server RSS {rss0:.0f} -> {rss:.0f} MiB", flush=True)
        f.check(cpu < 2.0, f"{label}: refused for {cpu:.3f} s of CPU (< 2 s)")

    # The same over HTTP: 7 MiB, under the body limit (8 MiB), over the
    # text bound.
    body = {"messages": [{"role": "user", "content": "a" * (7 * MIB)}], "max_tokens": 1}
    st, err = error_of(raw(server.http, "POST", "/v1/chat/completions", body=body,
                           headers={"Authorization": metadata[0][1]} if metadata else None))
    f.check(st == 400 and err["message"].startswith(f"request: {7 * MIB + 4} bytes of text exceed"),
            f"{label}: a 7 MiB chat body -> 400 naming the request's size: {st} {err}")

    # Undecodable requests, as raw bytes.
    generate = channel.unary_stream("/strata.v1.Inference/Generate",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
    tokenize = channel.unary_unary("/strata.v1.Inference/Tokenize",
                                   request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
    chat = field(4, field(1, field(1, b"user") + field(2, b"bad \xc3\x28 text")))
    cases = [
        ("prompt", generate, field(2, b"Hi \xff\xfe there"),
         "prompt: not valid UTF-8 (byte 3 of 11); a string field must be UTF-8 "
         "(strata.v1.GenerateRequest)"),
        ("messages[0].content", generate, chat,
         "messages.messages[0].content: not valid UTF-8 (byte 4 of 11); a string field must "
         "be UTF-8 (strata.v1.GenerateRequest)"),
        ("garbage", generate, b"\xff\xff\xff\xff\x07",
         "request: field 268435455 of wire type 7 at byte 0 (the bytes are not protobuf) "
         "(strata.v1.GenerateRequest)"),
        ("Tokenize text", tokenize, field(2, b"\x80"),
         "text: not valid UTF-8 (byte 0 of 1); a string field must be UTF-8 "
         "(strata.v1.TokenizeRequest)"),
    ]
    for what, method, data, want in cases:
        try:
            out = method(data, timeout=30, metadata=metadata)
            if method is generate:
                list(out)
            f.check(False, f"{label}: {what}: refused")
        except grpc.RpcError as e:
            f.check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and e.details() == want,
                    f"{label}: {what} -> INVALID_ARGUMENT naming it: {e.code()} {e.details()!r}")
    # The server goes on.
    ok = list(stub.Generate(pb.GenerateRequest(prompt="Hi", max_tokens=2), timeout=60,
                            metadata=metadata))
    f.check(ok and ok[-1].done.usage.completion_tokens == 2, f"{label}: still serving")
    st, _ = error_of(raw(server.http, "POST", "/v1/chat/completions",
                         body=b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
                         headers={"Authorization": metadata[0][1]} if metadata else None))
    f.check(st == 400, f"{label}: an HTTP body with invalid UTF-8 -> 400")
    return stub


def pb_grpc_stub(stubs, address):
    _, pb_grpc, grpc = stubs
    return pb_grpc.InferenceStub(grpc.insecure_channel(address))


def check_keepalive(f, server, stubs, label):
    """A client that pings every 1 s (strata::Client's keepalive), also
    between calls, keeps its connection: the server allows the pings (its
    default answered the third with GOAWAY too_many_pings, which closes the
    connection and the calls on it)."""
    pb, pb_grpc, grpc = stubs
    channel = grpc.insecure_channel(server.address, options=[
        ("grpc.keepalive_time_ms", 1000), ("grpc.keepalive_timeout_ms", 1000),
        ("grpc.keepalive_permit_without_calls", 1), ("grpc.http2.max_pings_without_data", 0)])
    pb_grpc.InferenceStub(channel).Health(pb.HealthRequest(), timeout=30)
    left = threading.Event()
    ready = grpc.ChannelConnectivity.READY
    channel.subscribe(lambda state: left.set() if state != ready else None)
    f.check(not left.wait(4.5), f"{label}: a client pinging every 1 s stays connected (4.5 s idle)")
    channel.close()


def check_queue(f, stub, pb, label, names):
    """8 streams on 4 slots: ClusterStatus shows the ones waiting."""
    errors = []

    def one():
        try:
            list(stub.Generate(pb.GenerateRequest(prompt="Once upon a time", max_tokens=200,
                                                  ignore_eos=True), timeout=600))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    queued = 0
    while time.monotonic() < deadline and queued == 0:
        s = stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=10)
        queued = s.queued_requests
    f.check(queued > 0, f"{label}: ClusterStatus.queued_requests {queued} > 0 with 8 streams "
            "on 4 slots")
    f.check([w.name for w in s.workers] == names,
            f"{label}: worker names {[w.name for w in s.workers]} == {names}")
    for t in threads:
        t.join()
    f.check(not errors, f"{label}: the 8 streams finished ({errors[:1]})")


def check_auth(f, args, workdir, stubs):
    pb, pb_grpc, grpc = stubs
    env = dict(os.environ, STRATA_API_KEY="s3cret-key")
    serve = start_serve(args, workdir, name="serve-key", env=env)
    try:
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(serve.address))
        calls = [
            ("Generate", lambda md: list(stub.Generate(pb.GenerateRequest(prompt="Hi", max_tokens=1),
                                                      timeout=30, metadata=md))),
            ("Tokenize", lambda md: stub.Tokenize(pb.TokenizeRequest(text="Hi"), timeout=30,
                                                  metadata=md)),
            ("Detokenize", lambda md: stub.Detokenize(pb.DetokenizeRequest(ids=[1]), timeout=30,
                                                      metadata=md)),
            ("ClusterStatus", lambda md: stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=30,
                                                            metadata=md)),
        ]
        for name, call in calls:
            for md in (None, [("authorization", "Bearer wrong")]):
                try:
                    call(md)
                    f.check(False, f"auth: gRPC {name} without the right key is refused")
                except grpc.RpcError as e:
                    f.check(e.code() == grpc.StatusCode.UNAUTHENTICATED,
                            f"auth: gRPC {name} {'without a key' if md is None else 'wrong key'}"
                            f" -> UNAUTHENTICATED ({e.code()})")
            try:
                call([("authorization", "Bearer s3cret-key")])
                f.check(True, f"auth: gRPC {name} with the key")
            except grpc.RpcError as e:
                f.check(False, f"auth: gRPC {name} with the key: {e.code()} {e.details()}")
        h = stub.Health(pb.HealthRequest(), timeout=30)
        f.check(h.state != 0, "auth: Health stays open (probes)")
        check_limits(f, serve, stubs, "serve with a key",
                     metadata=[("authorization", "Bearer s3cret-key")])
    finally:
        serve.kill()


def main():
    args = parse_args_or_skip()
    with tempfile.TemporaryDirectory(prefix="strata-limits-") as workdir:
        stubs = load_stubs(args.proto_dir, workdir)
        pb = stubs[0]
        f = Failures()

        def check(procs, host, grpc_address, label):
            front = procs[-1]  # serve, or the coordinator once the pipeline serves
            stub = check_limits(f, front, stubs, label)
            check_keepalive(f, front, stubs, label)
            check_queue(f, stub, pb, label, ["stage 0"] if label == "serve" else ["w0", "w1"])
            if label == "serve":
                check_auth(f, args, workdir, stubs)

        sys.exit(run_setup(args, workdir, stubs, f, check))


if __name__ == "__main__":
    main()
