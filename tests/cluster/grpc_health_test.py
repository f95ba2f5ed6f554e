#!/usr/bin/env python3
"""grpc.health.v1 on real processes, as a Kubernetes `grpc` probe sees it:
two `strata-worker`s and a `strata-coordinator` on loopback (the helpers of
cluster_test.py), then `strata serve`.

  workers      "" and "strata.v1.Worker" SERVING once they listen;
               "strata.v1.Worker.shard" SERVING once the coordinator loaded
               their shards.
  coordinator  "" and "strata.v1.Inference" SERVING once the cluster serves;
               kill -9 of a worker: NOT_SERVING; the worker restarted on its
               address: SERVING again. One info line per request in its log.
  serve        SERVING once it listens.

Waits are Watch streams (each change pushed by the server), bounded by
deadlines. Health stubs are generated from proto/grpc/health/v1 at test time.
Exit status: 0 passed, 1 failed, 77 skipped (model or grpcio absent).
"""
import argparse
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test as ct  # noqa: E402


def load_health_stubs(proto_dir, workdir):
    try:
        import grpc
        from grpc_tools import protoc
    except ImportError:
        ct.skip("grpcio / grpcio-tools not installed (scripts/fetch-models.sh)")
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
    def __init__(self, address, pb, pb_grpc, grpc):
        self.pb, self.grpc = pb, grpc
        self.stub = pb_grpc.HealthStub(grpc.insecure_channel(address))

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
            w0 = Health(c.workers[0].address, *stubs)
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

            api = ct.Api(c.address, *api_stubs)
            ids, done, err = api.generate(ct.PROMPTS[0], 4, timeout=120)
            f.check(err is None and len(ids) == 4, f"a request is served ({err})")

            c.workers[1].signal(signal.SIGKILL)
            got = coord.until(stream, "NOT_SERVING")
            f.check(got == "NOT_SERVING", f"coordinator: NOT_SERVING after kill -9 of a worker ({got})")
            f.check(coord.check("strata.v1.Inference") == "NOT_SERVING",
                    "coordinator: strata.v1.Inference NOT_SERVING")
            f.check(c.coordinator.alive(), "the coordinator is still up")

            c.start_worker(1)
            got = coord.until(stream, "SERVING")
            f.check(got == "SERVING", f"coordinator: SERVING again once the worker is back ({got})")
            stream.cancel()

            log = open(c.coordinator.log_path, errors="replace").read()
            f.check(" info " in log and "request 1: finished length: prompt " in log
                    and "generated 4, ttft " in log,
                    "coordinator log: one info line for the request")
        finally:
            if f.n:
                print(c.logs())
            c.close()

        s = ct.Serve(args, workdir, 1)
        try:
            h = Health(s.address, *stubs)
            f.check(h.check("") == "SERVING", "serve: SERVING once it listens")
            f.check(h.check("strata.v1.Inference") == "SERVING",
                    "serve: strata.v1.Inference SERVING")
        finally:
            if f.n:
                print(s.logs())
            s.close()
    print(f"{f.passed} passed, {f.n} failed")
    return 1 if f.n else 0


if __name__ == "__main__":
    sys.exit(main())
