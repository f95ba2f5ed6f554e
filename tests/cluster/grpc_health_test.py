#!/usr/bin/env python3
"""grpc.health.v1 on real processes, as a Kubernetes `grpc` probe sees it:
two `strata-worker`s and a `strata-coordinator` on loopback (the helpers of
cluster_test.py), then `strata serve`.

  workers      "" and "strata.v1.Worker" SERVING once they listen (asked
               over mutual TLS; a plaintext probe is refused);
               "strata.v1.Worker.shard" SERVING once the coordinator loaded
               their shards.
  coordinator  "" and "strata.v1.Inference" SERVING once the cluster serves;
               kill -9 of a worker: NOT_SERVING; the worker restarted on its
               address: SERVING again. One info line per request in its log.
  strata status  exit 0 while the cluster serves, 3 while it answers but
               does not (a coordinator whose worker is not there yet:
               "starting"; a worker killed: degraded, then serving on the
               worker left with the killed one unreachable), 0 again once
               the worker is back (a spare), 1 with nothing listening.
               That coordinator logs JSON lines (STRATA_LOG_FORMAT=json);
               --log-format xml is refused.
  serve        SERVING once it listens; after two requests its GET /metrics
               page parses with prometheus_client and counts them exactly.

Waits are Watch streams (each change pushed by the server), bounded by
deadlines. Health stubs are generated from proto/grpc/health/v1 at test time.
Exit status: 0 passed, 1 failed, 77 skipped (model or grpcio absent).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test as ct  # noqa: E402


def load_health_stubs(proto_dir, workdir):
    try:
        import grpc
        from grpc_tools import protoc
    except ImportError:
        ct.skip("grpcio / grpcio-tools not installed (scripts/install-test-tools.sh)")
    out = os.path.join(workdir, "health_stubs")
    os.makedirs(out, exist_ok=True)
    # Generated as top-level modules (health_pb2): a `grpc.health` package
    # would be looked for inside grpcio's own `grpc`.
    health_dir = os.path.join(proto_dir, "grpc/health/v1")
    rc = protoc.main(["protoc", f"-I{health_dir}", f"--python_out={out}",
                      f"--grpc_python_out={out}",
                      os.path.join(health_dir, "health.proto")])
    if rc != 0:
        raise RuntimeError("protoc failed on health.proto")
    sys.path.insert(0, out)
    import health_pb2
    import health_pb2_grpc
    return health_pb2, health_pb2_grpc, grpc


class Health:
    def __init__(self, address, pb, pb_grpc, grpc, channel=None):
        """`channel`: a TLS channel to a worker (cluster links are mutual
        TLS: a probe needs a certificate too); default plaintext."""
        self.pb, self.grpc = pb, grpc
        self.stub = pb_grpc.HealthStub(channel or grpc.insecure_channel(address))

    def check(self, service=""):
        try:
            r = self.stub.Check(self.pb.HealthCheckRequest(service=service), timeout=10)
            return self.pb.HealthCheckResponse.ServingStatus.Name(r.status)
        except self.grpc.RpcError as e:
            return e.code().name

    def watch(self, service=""):
        return self.stub.Watch(self.pb.HealthCheckRequest(service=service), timeout=120)

    def until(self, stream, status):
        """Reads the Watch stream until it says `status`; what it said last."""
        last = None
        try:
            for r in stream:
                last = self.pb.HealthCheckResponse.ServingStatus.Name(r.status)
                if last == status:
                    return last
        except self.grpc.RpcError as e:
            return f"{last} then {e.code().name}"
        return last


class ServeHttp:
    """`strata serve MODEL --workers 2` with gRPC and HTTP on ephemeral ports."""

    def __init__(self, args, workdir):
        self.log_path = os.path.join(workdir, "serve-http.log")
        self.log = open(self.log_path, "ab")
        self.p = subprocess.Popen(
            [args.strata, "serve", args.model, "--workers", "2", "-t", "2",
             "-c", "512", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=self.log)
        lines = []
        t = threading.Thread(target=lambda: [lines.append(self.p.stdout.readline())
                                             for _ in range(2)], daemon=True)
        t.start()
        t.join(180)
        lines = [x.decode(errors="replace").strip() for x in lines]
        if len(lines) < 2 or not lines[0].startswith("listening on ") or \
                not lines[1].startswith("http listening on "):
            self.close()
            raise RuntimeError(f"serve did not start: {lines}")
        self.address = lines[0].split()[-1]
        self.http = lines[1].split()[-1]
        threading.Thread(target=lambda: [None for _ in self.p.stdout], daemon=True).start()

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.log.close()


def scrape(http):
    """{(name, ((label, value), ...)): value} from GET /metrics, read with
    prometheus_client's parser; None when it is not installed."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return None
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=30) as r:
        ctype = r.headers.get("Content-Type", "")
        text = r.read().decode("utf-8")
    assert ctype.startswith("text/plain"), ctype
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))
            out[(s.name, labels)] = s.value
    return out


def strata_status(args, address):
    """(exit status, stdout) of `strata status --server ADDRESS`."""
    r = subprocess.run([args.strata, "status", "--server", address, "--timeout", "30"],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def status_until(args, address, want, deadline_s=60):
    """Runs `strata status` until it exits `want` (the coordinator's state
    follows its health checks, so a change shows after one of them) or the
    deadline passes; (last exit status, its output)."""
    end = time.monotonic() + deadline_s
    while True:
        rc, out = strata_status(args, address)
        if rc == want or time.monotonic() > end:
            return rc, out
        time.sleep(0.2)


def check_status_starting(args, workdir, f):
    """A coordinator whose only worker is not running answers `strata
    status` with state starting and exit 3; with nothing listening, exit 1."""
    cfg = os.path.join(workdir, "starting.yaml")
    with open(cfg, "w") as out:
        out.write(f"model: {args.model}\nlisten: 127.0.0.1:{ct.free_port()}\n"
                  "http_listen: 'off'\ncontext_length: 256\ninsecure: true\n"
                  f"workers:\n  - address: 127.0.0.1:{ct.free_port()}\n    name: w0\n")
    # Its log as JSON lines (STRATA_LOG_FORMAT, as a container would set it).
    os.environ["STRATA_LOG_FORMAT"] = "json"
    try:
        coord = ct.Proc("starting-coordinator", [args.coordinator, "--config", cfg], workdir)
    finally:
        del os.environ["STRATA_LOG_FORMAT"]
    try:
        rc, out = strata_status(args, coord.address)
        f.check(rc == 3 and "state: starting" in out,
                f"strata status: exit 3, state starting, while the worker is absent ({rc}: {out})")
        f.check(coord.alive(), "the coordinator waits for its worker")
    finally:
        coord.kill()
    # gRPC's own lines (not spdlog's) may share stderr: the JSON ones are
    # those that start with "{".
    records = []
    with open(coord.log_path, errors="replace") as log:
        for line in log:
            if line.startswith("{"):
                try:
                    records.append(json.loads(line))
                except ValueError:
                    records.append({"unparsed": line})
    fields = {"time", "level", "logger", "message"}
    f.check(records and all(set(r) == fields and r["logger"] == "strata-coordinator"
                            for r in records),
            f"coordinator log: JSON lines with {sorted(fields)} ({records[:3]})")
    # Logged before it listens: there whatever the timing.
    f.check(any(r.get("level") == "warning" and "insecure: true" in r.get("message", "")
                for r in records),
            f"coordinator log: the plaintext-links warning as JSON ({records[:3]})")
    rc = subprocess.run([args.coordinator, "--config", cfg, "--log-format", "xml"],
                        capture_output=True, text=True, timeout=60)
    f.check(rc.returncode == 2 and "--log-format: 'xml' is not a format" in rc.stderr,
            f"coordinator: --log-format xml refused, exit 2 ({rc.returncode}: {rc.stderr})")
    rc, out = strata_status(args, f"127.0.0.1:{ct.free_port()}")
    f.check(rc == 1 and "UNAVAILABLE" in out,
            f"strata status: exit 1 with nothing listening ({rc}: {out})")


def check_serve_metrics(args, workdir, stubs, api_stubs, f):
    s = ServeHttp(args, workdir)
    try:
        h = Health(s.address, *stubs)
        f.check(h.check("") == "SERVING", "serve: SERVING once it listens")
        f.check(h.check("strata.v1.Inference") == "SERVING",
                "serve: strata.v1.Inference SERVING")
        rc, out = strata_status(args, s.address)
        f.check(rc == 0, f"serve: strata status exits 0 ({rc}: {out})")
        api = ct.Api(s.address, *api_stubs)
        prompt_tokens = 0
        for p in ct.PROMPTS:
            ids, done, err = api.generate(p, 4, timeout=120)
            f.check(err is None and len(ids) == 4, f"serve: a request is served ({err})")
            prompt_tokens += done.usage.prompt_tokens if done else 0
        m = scrape(s.http)
        if m is None:
            print("note: prometheus_client absent: /metrics not parsed (scripts/install-test-tools.sh)")
            return
        want = {
            ("strata:prompt_tokens_total", ()): prompt_tokens,
            ("strata:generation_tokens_total", ()): 8,
            ("strata:request_success_total", (("finished_reason", "length"),)): 2,
            ("strata:time_to_first_token_seconds_count", ()): 2,
            ("strata:e2e_request_latency_seconds_count", ()): 2,
            ("strata:inter_token_latency_seconds_count", ()): 6,
            ("strata:worker_up", (("worker", "stage 0"),)): 1,
            ("strata:worker_up", (("worker", "stage 1"),)): 1,
        }
        for key, value in want.items():
            f.check(m.get(key) == value, f"serve /metrics: {key} == {value} ({m.get(key)})")
        steps = m.get(("strata:worker_step_seconds_count", (("worker", "stage 1"),)), 0)
        f.check(steps >= 8, f"serve /metrics: stage 1 ran >= 8 micro-batches ({steps})")
    finally:
        if f.n:
            print(open(s.log_path, errors="replace").read()[-3000:])
        s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proto-dir", required=True)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        ct.skip(f"{args.model} absent (scripts/fetch-models.sh)")
    f = ct.Failures()
    with tempfile.TemporaryDirectory(prefix="strata-health-") as workdir:
        stubs = load_health_stubs(args.proto_dir, workdir)
        api_stubs = ct.load_stubs(args.proto_dir, workdir)
        c = ct.Cluster(args, workdir, 2)
        try:
            grpc = stubs[2]
            w0 = Health(c.workers[0].address, *stubs,
                        channel=ct.worker_channel(grpc, workdir, c.workers[0].address, "w0"))
            f.check(Health(c.workers[0].address, *stubs).check("") == "UNAVAILABLE",
                    "worker: a plaintext probe is refused (mutual TLS)")
            f.check(w0.check("") == "SERVING", "worker: '' SERVING once it listens")
            f.check(w0.check("strata.v1.Worker") == "SERVING",
                    "worker: strata.v1.Worker SERVING")
            got = w0.until(w0.watch("strata.v1.Worker.shard"), "SERVING")
            f.check(got == "SERVING", f"worker: strata.v1.Worker.shard SERVING once loaded ({got})")

            coord = Health(c.address, *stubs)
            stream = coord.watch("")
            got = coord.until(stream, "SERVING")
            f.check(got == "SERVING", f"coordinator: SERVING once the cluster serves ({got})")
            f.check(coord.check("strata.v1.Inference") == "SERVING",
                    "coordinator: strata.v1.Inference SERVING")
            f.check(coord.check("no.such.Service") == "NOT_FOUND",
                    "coordinator: an unknown service is NOT_FOUND")
            rc, out = status_until(args, c.address, 0)
            f.check(rc == 0 and "state: serving" in out,
                    f"strata status: exit 0 while serving ({rc}: {out})")

            api = ct.Api(c.address, *api_stubs)
            ids, done, err = api.generate(ct.PROMPTS[0], 4, timeout=120)
            f.check(err is None and len(ids) == 4, f"a request is served ({err})")

            # Both services are watched: the coordinator may reload the model
            # onto the surviving worker right after it noticed the kill, so a
            # Check of the second service after the first's change can
            # already find it serving again (it did once under load).
            inference = coord.watch("strata.v1.Inference")
            got = coord.until(inference, "SERVING")
            f.check(got == "SERVING", f"coordinator: strata.v1.Inference SERVING before the kill ({got})")
            c.workers[1].signal(signal.SIGKILL)
            got = coord.until(stream, "NOT_SERVING")
            f.check(got == "NOT_SERVING", f"coordinator: NOT_SERVING after kill -9 of a worker ({got})")
            got = coord.until(inference, "NOT_SERVING")
            f.check(got == "NOT_SERVING", f"coordinator: strata.v1.Inference NOT_SERVING ({got})")
            inference.cancel()
            f.check(c.coordinator.alive(), "the coordinator is still up")
            rc, out = status_until(args, c.address, 3)
            f.check(rc == 3 and "strata status: not serving: " in out,
                    f"strata status: exit 3 with a worker killed ({rc}: {out})")

            c.start_worker(1)
            got = coord.until(stream, "SERVING")
            f.check(got == "SERVING", f"coordinator: SERVING again once the worker is back ({got})")
            rc, out = status_until(args, c.address, 0)
            f.check(rc == 0, f"strata status: exit 0 again once the worker is back ({rc}: {out})")
            stream.cancel()

            log = open(c.coordinator.log_path, errors="replace").read()
            f.check(" info " in log and "request 1: finished length: prompt " in log
                    and "generated 4, ttft " in log,
                    "coordinator log: one info line for the request")
        finally:
            if f.n:
                print(c.logs())
            c.close()

        check_status_starting(args, workdir, f)
        check_serve_metrics(args, workdir, stubs, api_stubs, f)
    print(f"{f.passed} passed, {f.n} failed")
    return 1 if f.n else 0


if __name__ == "__main__":
    sys.exit(main())
