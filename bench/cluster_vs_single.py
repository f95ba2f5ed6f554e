#!/usr/bin/env python3
"""Decode and prefill tok/s of one process (`strata run`) against a
coordinator + 2 workers on loopback at the same total thread count
(`strata run -t 2` against two workers with 1 thread each), in interleaved
runs, with the ratio; and the per-hop latency of one decode micro-batch
(a decode step of coordinator + 1 worker with 1 thread against `strata run
-t 1`: the difference is two hops, coordinator -> worker -> coordinator).

    ~/.cache/strata/venv/bin/python bench/cluster_vs_single.py \
        --build build [--model M.gguf] [--rounds 3] [-n 64] [--prompt-tokens 256]

Prints one line per run and a summary (medians). Uses the process helpers and
gRPC stubs of tests/cluster/cluster_test.py.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import cluster_test as ct  # noqa: E402

PROMPT_WORD = " the quick brown fox jumps over the lazy dog"


def single(args, prompt, threads=2):
    out = subprocess.run([args.strata, "run", "-m", args.model, "-p", prompt,
                          "-n", str(args.n), "--ignore-eos", "-t", str(threads),
                          "-c", str(args.ctx), "--json"],
                         capture_output=True, text=True, timeout=1800, check=True)
    t = json.loads(out.stdout)["timings"]
    return t["prefill_tok_s"], t["decode_tok_s"], t["decode_s"] / max(1, t["generated_tokens"] - 1)


def cluster(api, pb, prompt, n):
    req = pb.GenerateRequest(prompt=prompt, max_tokens=n, ignore_eos=True)
    done = None
    for r in api.stub.Generate(req, timeout=1800):
        if r.HasField("done"):
            done = r.done
    t = done.timings
    steps = max(1, done.usage.completion_tokens - 1)
    return t.prefill_tok_s, t.decode_tok_s, t.decode_ms / 1000 / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=1024)
    args = ap.parse_args()
    args.strata = os.path.join(args.build, "client/cli/strata")
    args.worker = os.path.join(args.build, "worker/strata-worker")
    args.coordinator = os.path.join(args.build, "coordinator/strata-coordinator")
    prompt = "Once upon a time," + PROMPT_WORD * (args.prompt_tokens // 9)

    rows = {"single": [], "cluster": [], "single1": [], "cluster1": []}
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as workdir:
        pb, pb_grpc, grpc = ct.load_stubs(os.path.join(ROOT, "proto"), workdir)
        # (a) coordinator + 2 workers x 1 thread against one process x 2.
        # (b) coordinator + 1 worker x 1 thread against one process x 1: the
        #     difference of a decode step is its 2 hops (there and back).
        for n_workers, keys in ((2, ("single", "cluster")), (1, ("single1", "cluster1"))):
            c = ct.Cluster(args, workdir, n_workers, ctx=args.ctx)
            try:
                api = ct.Api(c.address, pb, pb_grpc, grpc)
                api.wait_state(pb.HealthResponse.SERVING, 300)
                cluster(api, pb, "warm up", 4)
                for r in range(args.rounds):
                    s = single(args, prompt, threads=n_workers)
                    rows[keys[0]].append(s)
                    print(f"round {r} single -t {n_workers}: prefill {s[0]:8.1f} tok/s  "
                          f"decode {s[1]:7.1f} tok/s", flush=True)
                    k = cluster(api, pb, prompt, args.n)
                    rows[keys[1]].append(k)
                    print(f"round {r} {n_workers} worker(s):  prefill {k[0]:8.1f} tok/s  "
                          f"decode {k[1]:7.1f} tok/s", flush=True)
            finally:
                c.close()
    med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in rows.items()}
    s, k = med["single"], med["cluster"]
    s1, k1 = med["single1"], med["cluster1"]
    hop_ms = (k1[2] - s1[2]) * 1000 / 2
    print(f"\nmodel {os.path.basename(args.model)}, prompt {args.prompt_tokens} tokens, "
          f"{args.n} generated, {args.rounds} interleaved rounds, medians:")
    print(f"  single (strata run -t 2):        prefill {s[0]:8.1f} tok/s  decode {s[1]:7.1f} tok/s")
    print(f"  coordinator + 2 workers (1 + 1): prefill {k[0]:8.1f} tok/s  decode {k[1]:7.1f} tok/s")
    print(f"  ratio cluster/single:            prefill {k[0] / s[0]:.2f}x        decode {k[1] / s[1]:.2f}x")
    print(f"  decode step at 1 thread: one process {s1[2] * 1000:.2f} ms, coordinator + 1 "
          f"worker {k1[2] * 1000:.2f} ms: per hop {hop_ms:.2f} ms")
    print(f"  load average: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
