#!/usr/bin/env python3
"""End-to-end tests of a strata cluster: real `strata-worker` and
`strata-coordinator` processes (and `strata serve`) on 127.0.0.1 with
ephemeral ports, driven through strata.v1.Inference with Python gRPC stubs
generated from proto/ at test time (grpcio-tools).

Scenarios (one per run, --scenario):
  splits      1, 2 and 3 workers (auto placement), uneven explicit splits,
              and `strata serve --workers 2`: greedy ids equal
              `strata run --json`'s for the same prompts.
  concurrent  8 streams at once on 2 workers: all complete and correct.
  kill        kill -9 of the last worker of 2 during 8 streams (greedy and
              seeded sampling): the requests move to a new pipeline on the
              worker left (migration) and finish with the very ids of an
              undisturbed run, none twice; the worker restarted becomes a
              spare. With `migration: {attempts: 0}`: the streams end with
              UNAVAILABLE naming the worker within 10 s, the coordinator
              stays up (DEGRADED), and the worker back on its address is
              reloaded.
  stop        kill -STOP of a worker (a silent hang): noticed within 2 s and
              migrated the same way; after kill -CONT the fenced-off worker
              is a spare.
  spare       kill -9 of a worker of 2 with a spare configured (explicit
              placement): the spare takes its blocks, same ids.
  return      kill -9 of a worker of 2 (explicit placement, no spare), back
              on its address a moment later: the requests wait for it and
              finish with the same ids.
  prefix      prefix caching, in `strata serve` (1 and 2 stages) and on 2
              workers: prompts sharing a system prompt report cached_tokens
              (whole 16-token blocks, never the last row), a second turn
              reuses the first turn's answer too, and greedy ids and logprobs
              equal those of `strata serve --prefix-cache off` and
              `strata run`.

Every Cluster's links are mutual TLS with certificates made by `strata certs`
(docs/security.md); Cluster(..., tls=False) runs them plaintext on loopback
(`insecure: true`).

Exit status: 0 passed, 1 failed, 77 skipped (model or grpcio absent).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A child process that prints "listening on HOST:PORT" when ready."""

    def __init__(self, name, argv, workdir, env=None):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, env=env)
        self.address = None
        line = self._readline(timeout=180)
        if not line or not line.startswith("listening on "):
            self.kill()
            raise RuntimeError(f"{name}: did not start ({line!r}); see {self.log_path}:\n"
                               + self.tail())
        self.address = line.split()[-1]
        # Keep draining stdout so the child never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _readline(self, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(self.p.stdout.readline()))
        t.daemon = True
        t.start()
        t.join(timeout)
        return out[0].decode(errors="replace").strip() if out else None

    def _drain(self):
        for _ in self.p.stdout:
            pass

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        self.p.send_signal(sig)

    def kill(self):
        if self.p.poll() is None:
            try:
                self.p.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.p.kill()
        self.p.wait()
        self.log.close()

    def tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def model_dirs(model):
    """The model's folder, and the real one when it is a link (a worker may
    resolve links before it checks the path against its model_dirs)."""
    dirs = {os.path.dirname(os.path.abspath(model)),
            os.path.dirname(os.path.realpath(model))}
    return ", ".join(sorted(dirs))


MAX_CERT_WORKERS = 16


def link_security(args, workdir, own, n_workers, tls=True):
    """The YAML of a process's link security: a tls: block for `own`
    ("coordinator", "w0", ...) with certificates `strata certs` made under
    WORKDIR/certs (once, for the coordinator and w0 .. w15), the peers a
    worker accepts being the coordinator and every worker; or, with
    tls=False, `insecure: true` (plaintext, loopback only)."""
    if not tls:
        return "insecure: true\n"
    certs = os.path.join(workdir, "certs")
    if not os.path.exists(os.path.join(certs, "ca.pem")):
        names = ["coordinator"] + [f"w{i}" for i in range(MAX_CERT_WORKERS)]
        subprocess.run([args.strata, "certs", certs, "--names", ",".join(names)],
                       check=True, stdout=subprocess.DEVNULL)
    lines = ["tls:", f"  ca: {certs}/ca.pem", f"  cert: {certs}/{own}.pem",
             f"  key: {certs}/{own}.key"]
    if own != "coordinator":
        peers = ["coordinator"] + [f"w{i}" for i in range(n_workers)]
        lines.append(f"  peers: [{', '.join(peers)}]")
    return "\n".join(lines) + "\n"


def worker_channel(grpc, workdir, address, name, own="coordinator"):
    """A gRPC channel to the worker `name` at `address` of a Cluster with
    TLS: the certificate of `own` (an allowed peer), the worker's checked
    for its name."""
    certs = os.path.join(workdir, "certs")

    def read(n):
        with open(os.path.join(certs, n), "rb") as f:
            return f.read()
    creds = grpc.ssl_channel_credentials(read("ca.pem"), read(f"{own}.key"),
                                         read(f"{own}.pem"))
    return grpc.secure_channel(address, creds,
                               options=[("grpc.ssl_target_name_override", name)])


class Cluster:
    """Workers and a coordinator on loopback, from generated config files;
    links mutual TLS (tls=False: plaintext)."""

    def __init__(self, args, workdir, n_workers, ranges=None, ctx=512, model=None,
                 max_sequences=8, spares=0, extra=(), tls=True):
        self.args, self.workdir = args, workdir
        # Every worker (spares too) accepts calls from the others.
        self.tls, self.n_workers = tls, n_workers + spares
        self.procs = []
        self.worker_ports = [free_port() for _ in range(n_workers + spares)]
        self.workers = [None] * (n_workers + spares)
        for i in range(n_workers + spares):
            self.start_worker(i)
        cfg = os.path.join(workdir, "cluster.yaml")
        lines = [f"model: {model or args.model}", f"listen: 127.0.0.1:{free_port()}",
                 f"context_length: {ctx}", f"max_sequences: {max_sequences}",
                 "workers:"]
        for i, port in enumerate(self.worker_ports):
            if i == n_workers:
                lines.append("spares:")
            lines.append(f"  - address: 127.0.0.1:{port}")
            lines.append(f"    name: w{i}")
            if ranges and i < n_workers:
                lines.append(f"    blocks: [{ranges[i][0]}, {ranges[i][1]}]")
        lines.extend(extra)
        with open(cfg, "w") as f:
            f.write("\n".join(lines) + "\n")
            f.write(link_security(args, workdir, "coordinator", n_workers, tls))
        self.coordinator = Proc("coordinator",
                                [args.coordinator, "--config", cfg], workdir)
        self.procs.append(self.coordinator)
        self.address = self.coordinator.address

    def worker_model_dirs(self, i):
        """The folders worker i may load models from (its config's model_dirs)."""
        return model_dirs(self.args.model)

    def start_worker(self, i, memory_budget="8GiB"):
        cfg = os.path.join(self.workdir, f"worker-{i}.yaml")
        with open(cfg, "w") as f:
            f.write(f"listen: 127.0.0.1:{self.worker_ports[i]}\n"
                    f"name: w{i}\nthreads: 1\nmemory_budget: {memory_budget}\n"
                    f"model_dirs: [{self.worker_model_dirs(i)}]\n"
                    "answer_timeout_ms: 120000\n")
            f.write(self.link_security(f"w{i}"))
        w = Proc(f"worker-{i}", [self.args.worker, "--config", cfg], self.workdir)
        self.workers[i] = w
        self.procs.append(w)
        return w

    def link_security(self, own):
        return link_security(self.args, self.workdir, own, self.n_workers, self.tls)

    def close(self):
        for p in reversed(self.procs):
            p.kill()

    def logs(self):
        return "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in self.procs)


class Serve:
    """`strata serve MODEL --workers N` on an ephemeral port."""

    def __init__(self, args, workdir, n_workers, ctx=512, max_sequences=8, extra=(),
                 threads=None):
        port = free_port()
        self.proc = Proc("serve", [args.strata, "serve", args.model,
                                   "--workers", str(n_workers), "-t", str(threads or n_workers),
                                   "-c", str(ctx), "--max-sequences", str(max_sequences),
                                   "--listen", f"127.0.0.1:{port}", *extra],
                         workdir)
        self.address = self.proc.address
        self.procs = [self.proc]

    def close(self):
        self.proc.kill()

    def logs(self):
        return f"--- serve ---\n{self.proc.tail()}"


class Api:
    def __init__(self, address, pb, pb_grpc, grpc):
        self.pb, self.grpc = pb, grpc
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.InferenceStub(self.channel)

    def wait_state(self, state, timeout):
        end = time.time() + timeout
        last = None
        while time.time() < end:
            try:
                h = self.stub.Health(self.pb.HealthRequest(), timeout=2)
                last = h
                if h.state == state:
                    return h
            except self.grpc.RpcError as e:
                last = e
            time.sleep(0.2)
        raise AssertionError(f"state {state} not reached in {timeout} s; last: {last}")

    def generate(self, prompt, n, on_delta=None, timeout=600, seed=None, grammar=""):
        """Returns (ids, done, error) where error is (code, message) or None.
        Greedy; with `seed`, sampled at temperature 0.8 with penalties."""
        req = self.pb.GenerateRequest(prompt=prompt, max_tokens=n, ignore_eos=True,
                                      grammar=grammar)
        if seed is not None:
            req.sampling.temperature = 0.8
            req.sampling.top_k = 40
            req.sampling.top_p = 0.95
            req.sampling.repeat_penalty = 1.1
            req.sampling.seed = seed
        ids, done = [], None
        try:
            for r in self.stub.Generate(req, timeout=timeout):
                if r.HasField("delta"):
                    ids.extend(r.delta.ids)
                    if on_delta:
                        on_delta(ids)
                else:
                    done = r.done
            return ids, done, None
        except self.grpc.RpcError as e:
            return ids, done, (e.code(), e.details())


def reference_ids(args, prompt, n, ctx=512):
    out = subprocess.run([args.strata, "run", "-m", args.model, "-p", prompt,
                          "-n", str(n), "--ignore-eos", "-t", "1", "-c", str(ctx),
                          "--json"], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"strata run failed: {out.stderr}")
    return json.loads(out.stdout)["ids"]


PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived an old "
    "fisherman who",
]
N_TOKENS = 16


class Failures:
    def __init__(self):
        self.n = 0
        self.passed = 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
            print(f"ok   {what}", flush=True)
        else:
            self.n += 1
            print(f"FAIL {what}", flush=True)


def scenario_splits(args, stubs, workdir, f):
    expected = [reference_ids(args, p, N_TOKENS) for p in PROMPTS]
    n_layer = args.n_layer
    # Uneven cuts; with few blocks (the tiny models have 3) every stage
    # still gets at least one: a = 1, b = 2.
    a, b = max(1, n_layer // 5), min(n_layer - 1, max(2, n_layer - n_layer // 4))
    setups = [
        ("1 worker", lambda: Cluster(args, workdir, 1)),
        ("2 workers auto", lambda: Cluster(args, workdir, 2)),
        ("3 workers auto", lambda: Cluster(args, workdir, 3)),
        (f"2 workers [0,{a}) [{a},{n_layer})",
         lambda: Cluster(args, workdir, 2, ranges=[(0, a), (a, n_layer)])),
        (f"3 workers [0,1) [1,{b}) [{b},{n_layer})",
         lambda: Cluster(args, workdir, 3, ranges=[(0, 1), (1, b), (b, n_layer)])),
        ("strata serve --workers 2", lambda: Serve(args, workdir, 2)),
    ]
    for name, make in setups:
        c = make()
        try:
            api = Api(c.address, *stubs)
            api.wait_state(stubs[0].HealthResponse.SERVING, 180)
            for p, want in zip(PROMPTS, expected):
                ids, done, err = api.generate(p, N_TOKENS)
                f.check(err is None and ids == want and done is not None,
                        f"{name}: {p[:24]!r}: {ids} == strata run {want}"
                        + (f" (error {err})" if err else ""))
            # CPU workers make no NCCL links: activation_link auto links
            # them over gRPC (strata serve's stages by function calls).
            links = [w.link_to_next for w in
                     api.stub.ClusterStatus(stubs[0].ClusterStatusRequest(), timeout=5).workers]
            between = "in-process" if name.startswith("strata serve") else "grpc"
            f.check(links == [between] * (len(links) - 1) + [""],
                    f"{name}: ClusterStatus link_to_next {links}")
        finally:
            if f.n:
                print(c.logs())
            c.close()


def scenario_placement(args, stubs, workdir, f):
    """Explicit ranges that can never load: the coordinator says why and
    exits 1 instead of answering "starting" forever."""
    n = args.n_layer
    cases = [
        (f"a gap: [0,1) [2,{n})", [(0, 1), (2, n)], "must start at block 1"),
        (f"past the blocks: [0,1) [1,{n + 4})", [(0, 1), (1, n + 4)], ""),
    ]
    for name, ranges, words in cases:
        c = Cluster(args, workdir, 2, ranges=ranges)
        try:
            try:
                rc = c.coordinator.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = None
            log = c.coordinator.tail()
            f.check(rc == 1 and "cannot serve" in log and words in log,
                    f"{name}: coordinator exit {rc} (want 1), log names the problem"
                    + ("" if rc == 1 else f":\n{log}"))
        finally:
            c.close()
    # A model the workers refuse (outside their model_dirs): the coordinator
    # keeps retrying (a worker may be reconfigured), and requests meanwhile
    # are refused naming the worker and its reason, not "shards are loading".
    outside = os.path.join(workdir, "elsewhere.gguf")
    shutil.copyfile(args.model, outside)
    c = Cluster(args, workdir, 2, model=outside)
    try:
        api = Api(c.address, *stubs)
        err, deadline = None, time.time() + 60
        while time.time() < deadline:
            _, _, err = api.generate("Once", 2, timeout=10)
            if err and "did not load" in err[1]:
                break
            time.sleep(0.5)
        f.check(err is not None and err[0] == api.grpc.StatusCode.UNAVAILABLE
                and "did not load" in err[1] and "worker w1 (" in err[1]
                and "outside the model directories" in err[1],
                f"refused model: generate says why: {err}")
    finally:
        c.close()


def scenario_concurrent(args, stubs, workdir, f):
    """Every stream's greedy ids, 1, 4 and 16 at once, equal its ids alone in
    one process (`strata run`), on 1, 2 and 3 workers and in `strata serve`:
    a sequence's logits do not depend on what shares its micro-batches."""
    subjects = ["a fox", "the old king", "my sister", "a small robot", "the river",
                "a baker", "the moon", "two friends"]
    prompts = [f"Story {i}: {subjects[i % 8]} " + ("found a" if i < 8 else "wanted to")
               for i in range(16)]
    expected = [reference_ids(args, p, N_TOKENS) for p in prompts]
    targets = [("1 worker", lambda d: Cluster(args, d, 1, max_sequences=16)),
               ("2 workers", lambda d: Cluster(args, d, 2, max_sequences=16)),
               ("3 workers", lambda d: Cluster(args, d, 3, max_sequences=16)),
               ("serve --workers 2", lambda d: Serve(args, d, 2, max_sequences=16))]
    for name, make in targets:
        d = os.path.join(workdir, name.replace(" ", "-"))
        os.makedirs(d)
        c = make(d)
        failed_before = f.n
        try:
            api = Api(c.address, *stubs)
            api.wait_state(stubs[0].HealthResponse.SERVING, 180)
            served = 0
            for together in (1, 4, 16):
                results = [None] * together

                def run(i):
                    results[i] = api.generate(prompts[i], N_TOKENS)

                threads = [threading.Thread(target=run, args=(i,)) for i in range(together)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                served += together
                for i, (ids, done, err) in enumerate(results):
                    f.check(err is None and done is not None and ids == expected[i],
                            f"{name}, {together} at once, stream {i}: {ids} == {expected[i]}"
                            + (f" ({err})" if err else ""))
            status = api.stub.ClusterStatus(stubs[0].ClusterStatusRequest(), timeout=5)
            f.check(status.requests_served == served,
                    f"{name}: requests_served {status.requests_served} == {served}")
        finally:
            if f.n > failed_before:
                print(c.logs())
            c.close()


SYSTEM = ("You are a careful assistant for a small bakery in a harbour town. "
          "You answer questions about bread, opening hours, the weekly specials, "
          "allergens and orders. Keep answers short and friendly, and never invent "
          "prices. The bakery opens at seven and closes at six, except on Sundays. ")
QUESTIONS = ["Question: when do you open on Monday? Answer:",
             "Question: do you sell rye bread? Answer:",
             "Question: can I order a cake for Friday? Answer:"]


def generate_logprobs(api, prompt, n):
    """(ids, logprobs, usage) of a greedy stream with logprobs; `prompt` is
    text or a list of token ids."""
    pb = api.pb
    if isinstance(prompt, str):
        req = pb.GenerateRequest(prompt=prompt, max_tokens=n, ignore_eos=True, logprobs=True)
    else:
        req = pb.GenerateRequest(prompt_ids=pb.TokenIds(ids=prompt), max_tokens=n,
                                 ignore_eos=True, logprobs=True)
    ids, lps, usage = [], [], None
    for r in api.stub.Generate(req, timeout=600):
        if r.HasField("delta"):
            ids.extend(r.delta.ids)
            lps.extend(c.logprob for c in r.delta.choices)
        else:
            usage = r.done.usage
    return ids, lps, usage


def scenario_prefix(args, stubs, workdir, f):
    prompts = [SYSTEM + q for q in QUESTIONS]
    expected = [reference_ids(args, p, N_TOKENS) for p in prompts]
    runs = {}
    targets = [("serve, prefix cache off", lambda d: Serve(args, d, 1,
                                                           extra=["--prefix-cache", "off"])),
               ("serve", lambda d: Serve(args, d, 1)),
               ("serve --workers 2", lambda d: Serve(args, d, 2)),
               ("2 workers", lambda d: Cluster(args, d, 2))]
    for name, make in targets:
        d = os.path.join(workdir, name.replace(" ", "-").replace(",", ""))
        os.makedirs(d)
        c = make(d)
        failed_before = f.n
        try:
            api = Api(c.address, *stubs)
            api.wait_state(stubs[0].HealthResponse.SERVING, 180)
            off = "off" in name
            # Each question, then the first again (its whole prompt cached).
            order = [0, 1, 2, 0]
            results = []
            for k, i in enumerate(order):
                ids, lps, usage = generate_logprobs(api, prompts[i], N_TOKENS)
                results.append((ids, lps))
                n = usage.prompt_tokens
                if off or k == 0:
                    want = "== 0"
                    ok = usage.cached_tokens == 0
                elif k == 3:
                    want = f"== {(n - 1) // 16 * 16}"
                    ok = usage.cached_tokens == (n - 1) // 16 * 16
                else:
                    want = "> 0, whole blocks, < prompt"
                    ok = (usage.cached_tokens > 0 and usage.cached_tokens % 16 == 0
                          and usage.cached_tokens < n)
                f.check(ok, f"{name}: prompt {k} ({n} tokens): cached_tokens "
                            f"{usage.cached_tokens} {want}")
                f.check(ids == expected[i],
                        f"{name}: prompt {k}: {ids} == strata run {expected[i]}")
            # A second turn: the first turn's ids, its answer (as sent to
            # the stages: all but the last id) and a new message; the
            # answer's blocks were saved while it was decoded.
            turn1 = list(api.stub.Tokenize(api.pb.TokenizeRequest(text=prompts[0]),
                                           timeout=30).ids)
            answer, lps, _ = generate_logprobs(api, turn1, 40)
            results.append((answer, lps))
            sent = len(turn1) + len(answer) - 1
            turn2 = turn1 + answer[:-1] + turn1[-8:]
            ids, lps, usage = generate_logprobs(api, turn2, N_TOKENS)
            results.append((ids, lps))
            want = 0 if off else min(sent // 16, (len(turn2) - 1) // 16) * 16
            f.check(usage.cached_tokens == want,
                    f"{name}: second turn ({len(turn2)} tokens): cached_tokens "
                    f"{usage.cached_tokens} == {want} (its answer's blocks too)")
            runs[name] = results
            if not off:
                base = runs["serve, prefix cache off"]
                f.check(results == base,
                        f"{name}: ids and logprobs bit-identical to the prefix cache off")
        finally:
            if f.n > failed_before:
                print(c.logs())
            c.close()


def scenario_fault_no_migration(args, stubs, workdir, f, how):
    """migration.attempts 0: a dead worker's requests end cleanly."""
    pb = stubs[0]
    c = Cluster(args, workdir, 2, extra=["migration:", "  attempts: 0"])
    try:
        api = Api(c.address, *stubs)
        api.wait_state(pb.HealthResponse.SERVING, 180)
        victim = c.workers[1]
        started = threading.Event()
        t_fault = [None]

        def on_delta(ids):
            if len(ids) >= 3 and not started.is_set():
                started.set()

        def fault():
            started.wait(120)
            t_fault[0] = time.time()
            victim.signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)

        threading.Thread(target=fault, daemon=True).start()
        ids, done, err = api.generate(PROMPTS[1], 1000, on_delta=on_delta, timeout=120)
        t_end = time.time()
        grpc = stubs[2]
        f.check(err is not None and err[0] == grpc.StatusCode.UNAVAILABLE,
                f"{how}, no migration: the stream ends with UNAVAILABLE (got {err}, {len(ids)} ids)")
        if t_fault[0]:
            f.check(t_end - t_fault[0] <= 10,
                    f"{how}, no migration: ended {t_end - t_fault[0]:.1f} s after the fault (<= 10 s)")
        # By its configured name and address, whichever process noticed.
        f.check(err is not None and f"worker w1 (127.0.0.1:{c.worker_ports[1]})" in err[1],
                f"{how}, no migration: the message names the worker: {err[1] if err else None!r}")
        f.check(c.coordinator.alive(), f"{how}, no migration: the coordinator is still up")
        h = api.wait_state(pb.HealthResponse.DEGRADED, 15)
        f.check(h.state == pb.HealthResponse.DEGRADED,
                f"{how}, no migration: Health DEGRADED ({h.message!r})")
        ids2, _, err2 = api.generate(PROMPTS[0], 4, timeout=30)
        f.check(err2 is not None and err2[0] == grpc.StatusCode.UNAVAILABLE,
                f"{how}, no migration: a request while degraded gets UNAVAILABLE at once ({err2})")
        # Back on the same address; the killed one with a budget one byte
        # short of its old shard: it gets a new plan (fewer blocks), not
        # the old shard refused forever.
        # (Only when its shard has blocks to give up: Gemma 3's last stage
        # holds one block and the 262k-token head.)
        before = api.stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).workers[1]
        shrink = how == "kill" and before.last_block - before.first_block >= 2
        if how == "kill":
            c.start_worker(1, memory_budget=str(before.weight_bytes + before.kv_bytes - 1)
                           if shrink else "8GiB")
        else:
            victim.signal(signal.SIGCONT)
        api.wait_state(pb.HealthResponse.SERVING, 60)
        if shrink:
            after = api.stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).workers[1]
            f.check(after.first_block > before.first_block and
                    after.weight_bytes + after.kv_bytes <= after.memory_budget_bytes,
                    f"kill, no migration: back with a smaller budget, w1 holds blocks "
                    f"[{after.first_block}, {after.last_block}) (was [{before.first_block}, "
                    f"{before.last_block}))")
        want = reference_ids(args, PROMPTS[0], N_TOKENS)
        ids3, done3, err3 = api.generate(PROMPTS[0], N_TOKENS)
        f.check(err3 is None and ids3 == want,
                f"{how}, no migration: after the worker is back: {ids3} == {want} ({err3})")
        status = api.stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
        f.check(status.state == pb.HealthResponse.SERVING and
                all(w.state == "serving" for w in status.workers),
                f"{how}, no migration: ClusterStatus serving: {[w.state for w in status.workers]}")
    finally:
        if f.n:
            print(c.logs())
        c.close()


MIGRATION_STREAMS = 8
MIGRATION_TOKENS = 40
# The last stream follows a grammar (seeded): its state is replayed too.
MIGRATION_GRAMMAR = 'root ::= ("yes" | "no" | " maybe" | ", " | " and")+'


def run_streams(api, prompts, on_delta=None):
    """All prompts at once (even: greedy, odd: seeded); per stream (ids,
    done, err, every delta's ids in order)."""
    results = [None] * len(prompts)

    def run(i):
        deltas = []

        def seen(ids):
            deltas.append(len(ids))
            if on_delta:
                on_delta(i, ids)

        ids, done, err = api.generate(
            prompts[i], MIGRATION_TOKENS, on_delta=seen, timeout=300,
            seed=None if i % 2 == 0 else 1000 + i,
            grammar=MIGRATION_GRAMMAR if i == len(prompts) - 1 else "")
        results[i] = (ids, done, err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def scenario_migration(args, stubs, workdir, f, how):
    """A worker fails during 8 streams; they finish with an undisturbed run's ids."""
    pb, grpc = stubs[0], stubs[2]
    n_layer = args.n_layer
    half = n_layer // 2
    if how in ("spare", "return"):
        # Explicit ranges: without a spare, no other plan is tried.
        c = Cluster(args, workdir, 2, ranges=[(0, half), (half, n_layer)],
                    spares=1 if how == "spare" else 0, max_sequences=MIGRATION_STREAMS)
    else:
        c = Cluster(args, workdir, 2, max_sequences=MIGRATION_STREAMS)
    try:
        api = Api(c.address, *stubs)
        api.wait_state(pb.HealthResponse.SERVING, 180)
        prompts = [f"Story {i}: " + PROMPTS[i % 2] for i in range(MIGRATION_STREAMS)]
        reference = run_streams(api, prompts)
        for i, (ids, done, err) in enumerate(reference):
            f.check(err is None and len(ids) == MIGRATION_TOKENS,
                    f"{how}: undisturbed stream {i}: {len(ids)} ids ({err})")
        # Fault when every stream has a few tokens, then watch Health.
        victim = c.workers[1]
        ready = threading.Event()
        counts = [0] * MIGRATION_STREAMS
        lock = threading.Lock()

        def on_delta(i, ids):
            with lock:
                counts[i] = len(ids)
                if min(counts) >= 4:
                    ready.set()

        t_fault, t_noticed, t_back = [None], [None], [None]

        def fault():
            if not ready.wait(120):
                return
            t_fault[0] = time.time()
            victim.signal(signal.SIGSTOP if how == "stop" else signal.SIGKILL)
            end = time.time() + 60
            while time.time() < end and t_back[0] is None:
                try:
                    h = api.stub.Health(pb.HealthRequest(), timeout=2)
                    if h.state != pb.HealthResponse.SERVING and t_noticed[0] is None:
                        t_noticed[0] = time.time()
                        if how == "return":  # the same worker comes back
                            c.start_worker(1)
                    if h.state == pb.HealthResponse.SERVING and t_noticed[0] is not None:
                        t_back[0] = time.time()
                except grpc.RpcError:
                    pass
                time.sleep(0.05)

        watcher = threading.Thread(target=fault, daemon=True)
        watcher.start()
        results = run_streams(api, prompts, on_delta=on_delta)
        watcher.join(70)
        f.check(t_fault[0] is not None, f"{how}: the fault came mid-stream")
        for i, (ids, done, err) in enumerate(results):
            f.check(err is None and ids == reference[i][0],
                    f"{how}: stream {i} ({'seeded' if i % 2 else 'greedy'}) equals the "
                    f"undisturbed run ({len(ids)} ids, {err})")
        if t_fault[0] and t_noticed[0]:
            noticed = t_noticed[0] - t_fault[0]
            print(f"{how}: noticed {noticed:.2f} s after the fault, serving again after "
                  f"{(t_back[0] or time.time()) - t_fault[0]:.2f} s", flush=True)
            f.check(noticed <= (2.0 if how == "stop" else 1.0),
                    f"{how}: noticed within {2.0 if how == 'stop' else 1.0} s ({noticed:.2f})")
        status = api.stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
        f.check(status.migrations >= 1 and status.requests_migrated >= 1,
                f"{how}: ClusterStatus counts {status.migrations} migration(s), "
                f"{status.requests_migrated} requests moved")
        serving = [w.name for w in status.workers if not w.spare]
        f.check(("w1" in serving) == (how == "return") and
                all(w.state == "serving" for w in status.workers if not w.spare),
                f"{how}: the pipeline is {serving}, serving")
        if how == "return":
            return
        # The failed worker back: a spare, not a member.
        if how == "stop":
            victim.signal(signal.SIGCONT)
        else:
            c.start_worker(1)
        end = time.time() + 30
        state = None
        while time.time() < end:
            status = api.stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            state = {w.name: (w.state, w.spare) for w in status.workers}
            if state.get("w1") == ("spare", True):
                break
            time.sleep(0.2)
        f.check(state.get("w1") == ("spare", True), f"{how}: w1 back as a spare: {state}")
        ids, done, err = api.generate(prompts[0], MIGRATION_TOKENS)
        f.check(err is None and ids == reference[0][0], f"{how}: serves on after it ({err})")
    finally:
        if f.n:
            print(c.logs())
        c.close()


def load_stubs(proto_dir, workdir):
    try:
        import grpc
        from grpc_tools import protoc
    except ImportError:
        skip("grpcio / grpcio-tools not installed in this Python "
             "(scripts/install-test-tools.sh installs them in ~/.cache/strata/venv)")
    out = os.path.join(workdir, "stubs")
    os.makedirs(out, exist_ok=True)
    import importlib.resources
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    rc = protoc.main(["protoc", f"-I{proto_dir}", f"-I{well_known}",
                      f"--python_out={out}", f"--grpc_python_out={out}",
                      os.path.join(proto_dir, "strata/v1/inference.proto"),
                      os.path.join(proto_dir, "strata/v1/worker.proto")])
    if rc != 0:
        raise RuntimeError("protoc failed")
    sys.path.insert(0, out)
    from strata.v1 import inference_pb2, inference_pb2_grpc
    return inference_pb2, inference_pb2_grpc, grpc


def n_layer_of(model):
    try:
        import gguf
    except ImportError:
        return None
    r = gguf.GGUFReader(model)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    return int(r.fields[f"{arch}.block_count"].parts[-1][0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--scenario", required=True,
                    choices=["splits", "concurrent", "kill", "stop", "spare", "return",
                             "placement",
                             "prefix"])
    args = ap.parse_args()
    if not os.path.exists(args.model):
        skip(f"{args.model} absent (scripts/fetch-models.sh)")
    args.n_layer = n_layer_of(args.model)
    if args.n_layer is None:
        skip("the gguf Python package is absent (scripts/install-test-tools.sh)")
    with tempfile.TemporaryDirectory(prefix="strata-cluster-") as workdir:
        stubs = load_stubs(args.proto_dir, workdir)
        f = Failures()
        if args.scenario == "splits":
            scenario_splits(args, stubs, workdir, f)
        elif args.scenario == "concurrent":
            scenario_concurrent(args, stubs, workdir, f)
        elif args.scenario == "placement":
            scenario_placement(args, stubs, workdir, f)
        elif args.scenario == "prefix":
            scenario_prefix(args, stubs, workdir, f)
        else:
            scenario_migration(args, stubs, workdir, f, args.scenario)
            if args.scenario in ("kill", "stop"):
                d = os.path.join(workdir, "no-migration")
                os.makedirs(d)
                scenario_fault_no_migration(args, stubs, d, f, args.scenario)
        print(f"{f.passed} passed, {f.n} failed")
        return 1 if f.n else 0


if __name__ == "__main__":
    sys.exit(main())
