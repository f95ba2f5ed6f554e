#!/usr/bin/env python3
"""Predicted decode tok/s (`strata plan`) against measured (`strata speed`).

For each model and round: a fresh strata-worker (HOME in a temporary folder,
so it measures its read bandwidth and FLOP rate instead of reading the
cache) on a free loopback port, `strata plan --json` over a one-worker
config pointing at it (its decode_tok_s: the weights a token reads / the
worker's measured read rate at that working-set size, "read GB/s" below), the worker stopped, then `strata speed
-p 0 -n 128 -r 3 --json` on the same model and threads (its median tg
tok/s). Rounds interleave the two so a machine shared with other work
disturbs both alike; the load average is printed beside each round. Both
the median and the best of the 3 tg runs are compared: the bandwidth is a
best-of figure too, and other work on the machine only ever slows a run.

Usage: bench/plan_vs_speed/run.py [--build build] [-t 2] [--rounds 3]
           [--models SmolLM2-135M-Instruct.Q4_1.gguf,gemma-3-270m-q4_k_m.gguf]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = os.path.expanduser("~/.cache/strata/models")


def start_worker(build, threads, home):
    cfg = os.path.join(home, "worker.yaml")
    with open(cfg, "w") as f:
        f.write(f"listen: 127.0.0.1:0\nbackend: cpu\nthreads: {threads}\n"
                f"memory_budget: 8GiB\nmodel_dirs: [{MODELS}]\nname: w0\ninsecure: true\n")
    env = dict(os.environ, HOME=home)
    p = subprocess.Popen([os.path.join(build, "worker/strata-worker"), "--config", cfg],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    for line in p.stdout:
        if line.startswith("listening on "):
            return p, line.split()[-1]
    raise RuntimeError("worker did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="SmolLM2-135M-Instruct.Q4_1.gguf,gemma-3-270m-q4_k_m.gguf")
    a = ap.parse_args()
    strata = os.path.join(a.build, "client/cli/strata")
    print(f"{'model':36} {'round':>5} {'read GB/s':>9} {'predicted':>9} {'median':>9} "
          f"{'ratio':>6} {'best':>9} {'ratio':>6} {'load':>5}")
    for model in a.models.split(","):
        path = os.path.join(MODELS, model)
        ratios, best_ratios = [], []
        for r in range(a.rounds):
            with tempfile.TemporaryDirectory() as home:
                worker, address = start_worker(a.build, a.threads, home)
                try:
                    cfg = os.path.join(home, "cluster.yaml")
                    with open(cfg, "w") as f:
                        f.write(f"model: {path}\ncontext_length: 512\nmax_sequences: 1\n"
                                f"insecure: true\nworkers:\n  - address: {address}\n    name: w0\n")
                    plan = json.loads(subprocess.run(
                        [strata, "plan", "--config", cfg, "--json"], check=True,
                        capture_output=True, text=True).stdout)
                finally:
                    worker.terminate()
                    worker.wait()
            speed = json.loads(subprocess.run(
                [strata, "speed", "-m", path, "-p", "0", "-n", "128", "-r", "3",
                 "-t", str(a.threads), "--json"], check=True, capture_output=True,
                text=True).stdout)
            predicted = plan["decode_tok_s"]
            measured = speed["tg"]["tok_s"]
            best = speed["tg"]["best_tok_s"]
            ratios.append(predicted / measured)
            best_ratios.append(predicted / best)
            print(f"{model:36} {r:>5} {plan['workers'][0].get('stage_read_bytes_per_s', plan['workers'][0]['read_bytes_per_s']) / 1e9:9.1f} "
                  f"{predicted:9.1f} {measured:9.1f} {predicted / measured:6.2f} "
                  f"{best:9.1f} {predicted / best:6.2f} {os.getloadavg()[0]:5.1f}", flush=True)
        print(f"{model:36} median of predicted / median tg: {statistics.median(ratios):.2f}, "
              f"predicted / best tg: {statistics.median(best_ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
