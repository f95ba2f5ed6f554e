#!/usr/bin/env python3
"""Resident memory of `strata serve` across rounds of long prompts, and the
time of those requests, for one or more strata binaries side by side (the
rounds interleaved between them).

Each round sends C concurrent /v1/completions requests with prompts of about
P tokens (distinct per request and round) and 8 generated tokens; after the
round, each server's VmRSS is read from /proc. What stays after a round is
memory the process keeps for nothing once its sequences ended (KV caches,
scratch), or caches that fill to a fixed size (the prefix cache: off by
default here, --prefix-cache to keep it on).

    python3 bench/serve_memory.py --strata build/client/cli/strata \\
        [--strata OTHER/strata] [--rounds 4] [--clients 4] [--prompt-words 1200]

Prints per binary: RSS idle, after each round, and the median request time;
with two binaries, the ratio of their median request times.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return float("nan")


def wait_health(port, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            sys.exit(f"serve on port {port} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"serve on port {port} did not become healthy")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", action="append", required=True, help="a strata binary (repeat)")
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--prompt-words", type=int, default=1200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--port", type=int, default=18900)
    ap.add_argument("--prefix-cache", action="store_true", help="leave the prefix cache on")
    args = ap.parse_args()

    servers = []
    for k, binary in enumerate(args.strata):
        port = args.port + 10 * k
        cmd = [binary, "serve", args.model, "--http", f"127.0.0.1:{port}",
               "--listen", f"127.0.0.1:{port + 1}", "-t", str(args.threads)]
        if not args.prefix_cache:
            cmd += ["--prefix-cache", "off"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        servers.append({"binary": binary, "port": port, "proc": proc, "rss": [], "times": []})
    try:
        for s in servers:
            wait_health(s["port"], s["proc"])
            s["idle"] = rss_mb(s["proc"].pid)

        def one(s, i, r):
            prompt = " ".join(WORDS[(i * 7 + r * 3 + w) % len(WORDS)]
                              for w in range(args.prompt_words))
            body = json.dumps({"prompt": prompt, "max_tokens": 8, "temperature": 0}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{s['port']}/v1/completions", body,
                                         {"Content-Type": "application/json"})
            t = time.perf_counter()
            urllib.request.urlopen(req, timeout=900).read()
            s["times"].append(time.perf_counter() - t)

        for r in range(args.rounds):
            order = servers if r % 2 == 0 else list(reversed(servers))
            for s in order:
                threads = [threading.Thread(target=one, args=(s, i, r))
                           for i in range(args.clients)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                s["rss"].append(rss_mb(s["proc"].pid))
        for s in servers:
            rounds = " ".join(f"{x:.0f}" for x in s["rss"])
            print(f"{s['binary']}: RSS MiB idle {s['idle']:.0f}, after each round {rounds}; "
                  f"request median {statistics.median(s['times']) * 1000:.0f} ms "
                  f"({len(s['times'])} requests)")
        if len(servers) == 2:
            a, b = (statistics.median(s["times"]) for s in servers)
            print(f"request time, second / first: {b / a:.3f}")
    finally:
        for s in servers:
            s["proc"].terminate()
        for s in servers:
            s["proc"].wait()


if __name__ == "__main__":
    main()
