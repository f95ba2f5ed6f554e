#!/usr/bin/env python3
"""The fault matrix: 16 concurrent streams on a loopback cluster (a
coordinator and 3 workers on SmolLM2, plus one spare when the coordinator
accepts `spares:`), every worker behind a fault_proxy.FaultProxy; for each
stage x fault a fault is injected mid-stream and the outcome checked
against an undisturbed reference run of the same 16 requests.

Faults: kill (SIGKILL, then the worker is restarted on its port once the
fault is noticed), stop (SIGSTOP for --stop-seconds [30], then SIGCONT),
term (SIGTERM, restarted once it exits), blackhole (its proxy swallows
every byte for --hold-seconds [8]; connections that lost bytes are reset
when it heals), delay (200 ms added each way per chunk, for the hold),
reset (every connection to the worker RST at once), slow (a 1 MB/s link
each way, for the hold). With --netns (default: when root and `ip` and
`nft` exist) also: the last worker in a network namespace behind a veth
pair, black-holed by nftables drop rules for the hold.

Requests: 16 prompts of 4 to 124 words, max_tokens 48..64, ignore_eos;
even streams greedy, odd ones temperature 0.8, top_p 0.95, seed 1000 + i.

Per cell it prints requests completed OK / failed UNAVAILABLE / other /
hung / corrupted, detection time (fault -> Health not SERVING or a
stream's first error, whichever first; "-" when neither happened) and
recovery time (fault -> Health SERVING again; "-" when it never left
SERVING), then a table of every cell (Markdown, for docs/reliability.md).

Checks, every cell: no stream hung (each ends within --request-timeout);
no corrupted or duplicated token (a completed stream's ids and text equal
the reference's; a failed stream's ids are a prefix of them); the cluster
serves again within --recover-timeout and the coordinator stays up. With
migration (the coordinator accepts `spares:`): 0 failed requests. Without
(today's main): every failure is UNAVAILABLE and its message names the
faulted worker (`worker w1 (...)`, or `... worker w1 is stopping` when its
neighbour reports a SIGTERM), and the output says so.

Short form (CI, the default): every fault once on stage 1 (the middle of
3). Long form (--long, or STRATA_FAULT_MATRIX_LONG=1): every stage.

    ~/.cache/strata/venv/bin/python tests/cluster/fault_matrix.py \\
        --strata build/client/cli/strata --worker build/worker/strata-worker \\
        --coordinator build/coordinator/strata-coordinator \\
        --model ~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --proto-dir proto [--long] [--faults kill,stop] [--json-out F]

Exit status: 0 passed, 1 failed, 77 skipped (model or grpcio absent).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_test as ct  # noqa: E402
import fault_cluster as fc  # noqa: E402

FAULTS = ["kill", "stop", "term", "blackhole", "delay", "reset", "slow"]
DELAY_MS = 200
SLOW_BYTES_S = 1_000_000
WORDS = ("once upon a time in a small village by the sea there lived an old "
         "fisherman who went out every morning before the sun came up and "
         "came back every evening with a boat full of fish that he sold at "
         "the market to the people of the town while his wife made bread and "
         "his children played on the beach with the dogs and the cats of the "
         "neighbours until the day a great storm came from the north").split()


def request_specs(n=16):
    specs = []
    for i in range(n):
        words = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(4 + 8 * i)]
        specs.append({"prompt": f"Story {i}: " + " ".join(words),
                      "max_tokens": 48 + (i * 5) % 17,
                      "temperature": 0.0 if i % 2 == 0 else 0.8,
                      "seed": None if i % 2 == 0 else 1000 + i})
    return specs


class Env:
    """The cluster under test, its client and its health monitor."""

    def __init__(self, args, stubs, workdir, features, netns=None):
        self.args, self.stubs, self.features = args, stubs, features
        self.pb, self.pb_grpc, self.grpc = stubs
        self.workdir, self.netns = workdir, netns
        self.cluster = None
        self.start()

    def start(self):
        args = self.args
        d = tempfile.mkdtemp(prefix="cluster-", dir=self.workdir)
        n = 2 if self.netns else args.workers
        self.cluster = fc.FaultCluster(
            args, d, self.features, n, spare=self.features.spares and not self.netns,
            max_sequences=16, netns=self.netns,
            netns_worker=n - 1 if self.netns else None)
        self.channel = self.grpc.insecure_channel(self.cluster.address)
        self.stub = self.pb_grpc.InferenceStub(self.channel)
        self.monitor = fc.HealthMonitor(self.stub, self.pb)
        if not self.monitor.wait_serving(args.start_timeout):
            raise RuntimeError("the cluster did not reach SERVING in "
                               f"{args.start_timeout} s:\n{self.cluster.logs()}")

    def restart(self):
        self.close()
        self.start()

    def close(self):
        if self.cluster:
            self.monitor.stop()
            self.channel.close()
            self.cluster.close()
            self.cluster = None


def run_requests(env, specs, timeout):
    return fc.start_streams(env.stub, env.pb, env.grpc, specs, timeout)


def wait_all(streams, until):
    for s in streams:
        s.ended.wait(max(0.0, until - time.monotonic()))
    return all(s.ended.is_set() for s in streams)


def collect_reference(env, specs, timeout):
    streams = run_requests(env, specs, timeout)
    if not wait_all(streams, time.monotonic() + timeout + 30):
        raise RuntimeError("the reference run hung")
    bad = [(i, s.error, len(s.ids)) for i, s in enumerate(streams)
           if s.error or s.done is None or len(s.ids) != s.spec["max_tokens"]]
    if bad:
        raise RuntimeError(f"the reference run failed (stream, error, ids): {bad}\n"
                           + env.cluster.logs())
    return [(list(s.ids), s.text) for s in streams]


def worker_at(env, stage):
    """The worker that serves pipeline stage `stage` now: after a migration
    a spare may hold it and the worker it replaced may be the spare.
    ClusterStatus lists the workers in pipeline order (spares flagged);
    matched by name, or by address where the build reports no names."""
    try:
        st = env.stub.ClusterStatus(env.pb.ClusterStatusRequest(), timeout=5)
        pipeline = [w for w in st.workers if not w.spare]
        if stage < len(pipeline):
            ws = pipeline[stage]
            for w in env.cluster.all_workers():
                if (ws.name and ws.name == w.name) or (not ws.name and ws.address == w.address):
                    return w
    except env.grpc.RpcError:
        pass
    return env.cluster.workers[stage]


def inject(env, w, fault, t_noticed):
    """Applies the fault to worker `w` and heals it; returns once healed
    (the streams keep running on their threads). `t_noticed()` is the
    detection time so far (None before)."""
    a = env.args
    hold = threading.Event()   # never set: waits below are the fault's duration

    def wait_noticed(limit):
        end = time.monotonic() + limit
        while time.monotonic() < end and t_noticed() is None:
            hold.wait(0.02)

    if fault == "kill":
        w.signal(signal.SIGKILL)
        w.wait_exit(10)
        wait_noticed(10)
        w.restart()
    elif fault == "term":
        w.signal(signal.SIGTERM)
        if not w.wait_exit(30):
            print(f"  note: {w.name} still running 30 s after SIGTERM; killed")
        wait_noticed(10)
        w.restart()
    elif fault == "stop":
        w.signal(signal.SIGSTOP)
        hold.wait(a.stop_seconds)
        w.signal(signal.SIGCONT)
    elif fault == "reset":
        w.proxy.reset()
    elif fault == "blackhole" and env.netns:
        env.netns.blackhole()
        hold.wait(a.hold_seconds)
        env.netns.heal()
    elif fault in ("blackhole", "delay", "slow"):
        {"blackhole": w.proxy.blackhole,
         "delay": lambda: w.proxy.delay(DELAY_MS),
         "slow": lambda: w.proxy.slow(SLOW_BYTES_S)}[fault]()
        hold.wait(a.hold_seconds)
        w.proxy.pass_()
    else:
        raise ValueError(f"fault: unknown {fault!r}")


def judge(streams, reference, worker_name):
    """Counts per outcome, and the first few problems in words."""
    r = {"requests": len(streams), "ok": 0, "unavailable": 0, "unavailable_named": 0,
         "other": 0, "hung": 0, "corrupted": 0, "problems": [], "messages": {}}
    for i, (s, (ref_ids, ref_text)) in enumerate(zip(streams, reference)):
        if not s.ended.is_set() or (s.error and s.error[0] == "DEADLINE_EXCEEDED"):
            r["hung"] += 1
            r["problems"].append(f"stream {i}: hung ({len(s.ids)} ids so far)")
            continue
        prefix = s.ids == ref_ids[:len(s.ids)]
        if s.error is None:
            if s.done is not None and s.ids == ref_ids and s.text == ref_text:
                r["ok"] += 1
            else:
                r["corrupted"] += 1
                r["problems"].append(
                    f"stream {i}: completed with {len(s.ids)} ids, differs from the reference"
                    f" ({len(ref_ids)} ids) at index "
                    f"{next((k for k, (x, y) in enumerate(zip(s.ids, ref_ids)) if x != y), min(len(s.ids), len(ref_ids)))}"
                    f"{'' if s.done is not None else ', no done message'}")
            continue
        key = f"{s.error[0]}: " + re.sub(r":\d+\)", ":PORT)", s.error[1])
        r["messages"][key] = r["messages"].get(key, 0) + 1
        if not prefix:
            r["corrupted"] += 1
            r["problems"].append(f"stream {i}: failed ({s.error[0]}) after {len(s.ids)} ids that"
                                 " are not a prefix of the reference's")
        if s.error[0] == "UNAVAILABLE":
            r["unavailable"] += 1
            if re.search(rf"\bworker {re.escape(worker_name)}\b", s.error[1]):
                r["unavailable_named"] += 1
            else:
                r["problems"].append(f"stream {i}: UNAVAILABLE not naming {worker_name}: "
                                     f"{s.error[1]!r}")
        else:
            r["other"] += 1
            r["problems"].append(f"stream {i}: {s.error[0]}: {s.error[1]!r}")
    return r


def run_cell(env, stage, fault, specs, reference, f):
    a = env.args
    label = f"stage {stage} ({'netns ' if env.netns else ''}{fault})"
    if env.monitor.state() != "SERVING" and not env.monitor.wait_serving(a.recover_timeout):
        print(f"  {label}: not SERVING before the cell; restarting the cluster")
        env.restart()
    worker = worker_at(env, stage)
    if worker is not env.cluster.workers[stage]:
        print(f"  {label}: stage {stage} is served by {worker.name} now")
    streams = run_requests(env, specs, a.request_timeout)
    t0 = time.monotonic()
    # Mid-stream: every stream has 4 tokens (or has ended).
    while time.monotonic() - t0 < a.request_timeout:
        if all(len(s.ids) >= 4 or s.ended.is_set() for s in streams):
            break
        time.sleep(0.01)
    tokens_before = sum(len(s.ids) for s in streams)
    t_fault = time.monotonic()

    def t_noticed():
        errs = [s.t_end for s in streams if s.error and s.t_end and s.t_end >= t_fault]
        cands = [t for t in [env.monitor.first_not_serving(t_fault), min(errs, default=None)]
                 if t is not None]
        return min(cands) if cands else None

    inject(env, worker, fault, t_noticed)
    all_ended = wait_all(streams, t0 + a.request_timeout + 30)
    t_probe, probes_failed = settle(env, a.recover_timeout)
    serving = t_probe is not None
    t_det = t_noticed()
    t_back = env.monitor.serving_again(t_fault)
    # Recovered: Health SERVING again and a new request served (the later
    # of the two). "-" when nothing noticed the fault: Health never left
    # SERVING, no stream failed and the first new request was served.
    t_rec = None
    if serving and (t_det is not None or t_back is not None or probes_failed):
        t_rec = max(t for t in (t_back, t_probe) if t is not None)
    ok_streams = [s for s in streams if s.error is None]
    gap = max((s.max_gap(t_fault) for s in ok_streams), default=None)
    r = judge(streams, reference, worker.name)
    r.update(stage=stage, worker=worker.name, fault=("netns " if env.netns else "") + fault,
             tokens_before_fault=tokens_before,
             detection_s=None if t_det is None else round(t_det - t_fault, 3),
             recovery_s=None if t_rec is None else round(t_rec - t_fault, 3),
             max_gap_s=None if gap is None else round(gap, 3),
             health=" > ".join(st for t, st in env.monitor.changes if t >= t_fault) or "SERVING",
             probes_failed=probes_failed,
             serving_after=serving, coordinator_up=env.cluster.coordinator.alive(),
             all_ended=all_ended,
             migrated=cluster_migrated(env))
    failed = r["unavailable"] + r["other"]
    print(f"  {label}: ok {r['ok']}/{r['requests']}, UNAVAILABLE {r['unavailable']}"
          f" (naming {worker.name}: {r['unavailable_named']}), other {r['other']},"
          f" hung {r['hung']}, corrupted {r['corrupted']}; detection {fmt_s(r['detection_s'])},"
          f" recovery {fmt_s(r['recovery_s'])}; longest pause of a completed stream"
          f" {fmt_s(r['max_gap_s'])}; {tokens_before} tokens out before the fault;"
          f" Health after the fault: {r['health']}; new requests refused while settling:"
          f" {probes_failed}",
          flush=True)
    for m, n in sorted(r["messages"].items(), key=lambda kv: -kv[1])[:3]:
        print(f"    {n:2} x {m}")
    for p in r["problems"][:6]:
        print(f"    {p}")
    f.check(r["hung"] == 0, f"{label}: 0 hung requests ({r['hung']})")
    f.check(r["corrupted"] == 0, f"{label}: 0 corrupted or duplicated tokens ({r['corrupted']})")
    if env.features.spares and not env.netns:
        f.check(failed == 0, f"{label}: 0 failed requests with a spare ({failed})")
    else:
        f.check(r["other"] == 0 and r["unavailable"] == r["unavailable_named"],
                f"{label}: every failure ({failed}) is UNAVAILABLE naming {worker.name}")
    f.check(serving and r["coordinator_up"],
            f"{label}: SERVING again within {a.recover_timeout:.0f} s, coordinator up")
    if not (serving and r["coordinator_up"]):
        print(env.cluster.logs())
    return r


def settle(env, timeout):
    """Waits for Health SERVING and then a short new request that succeeds
    (Health alone can say SERVING while the pipeline is being rebuilt).
    Returns (the successful request's start, how many failed before), or
    (None, n) when none succeeded within `timeout`."""
    end = time.monotonic() + timeout
    failed = 0
    probe = {"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0.0}
    while time.monotonic() < end:
        if not env.monitor.wait_serving(max(0.0, end - time.monotonic())):
            break
        s = fc.Stream(probe)
        fc.run_stream(env.stub, env.pb, env.grpc, probe, 30, s)
        if s.error is None and len(s.ids) == 2:
            return s.t_start, failed
        failed += 1
        time.sleep(0.1)
    return None, failed


def cluster_migrated(env):
    try:
        st = env.stub.ClusterStatus(env.pb.ClusterStatusRequest(), timeout=5)
        return st.requests_migrated
    except env.grpc.RpcError:
        return None


def fmt_s(v):
    return "-" if v is None else f"{v:.2f} s"


def table(rows):
    out = ["| stage | fault | OK | UNAVAILABLE | other | hung | corrupted | detection | recovery"
           " | longest pause |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['stage']} | {r['fault']} | {r['ok']}/{r['requests']} | "
                   f"{r['unavailable']} | {r['other']} | {r['hung']} | {r['corrupted']} | "
                   f"{fmt_s(r['detection_s'])} | {fmt_s(r['recovery_s'])} | "
                   f"{fmt_s(r['max_gap_s'])} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--long", action="store_true",
                    default=os.environ.get("STRATA_FAULT_MATRIX_LONG") == "1",
                    help="every stage (default: stage 1 only)")
    ap.add_argument("--stages", help="comma-separated stages (overrides --long)")
    ap.add_argument("--faults", default=",".join(FAULTS))
    ap.add_argument("--rounds", type=int, default=1, help="times each cell runs")
    ap.add_argument("--stop-seconds", type=float, default=30)
    ap.add_argument("--hold-seconds", type=float, default=8)
    ap.add_argument("--request-timeout", type=float, default=150,
                    help="a request not ended by then is hung (s)")
    ap.add_argument("--recover-timeout", type=float, default=90)
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument("--netns", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        ct.skip(f"{args.model} absent (scripts/fetch-models.sh)")
    faults = args.faults.split(",")
    for x in faults:
        if x not in FAULTS:
            ap.error(f"--faults: unknown {x!r}; expected some of {','.join(FAULTS)}")
    if args.stages:
        stages = [int(x) for x in args.stages.split(",")]
    else:
        stages = list(range(args.workers)) if args.long else [min(1, args.workers - 1)]
    specs = request_specs()
    rows = []
    t_begin = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="strata-faults-") as workdir:
        stubs = ct.load_stubs(args.proto_dir, workdir)
        features = fc.Features(args, workdir)
        f = ct.Failures()
        print(f"links: {'insecure: true' if features.insecure else 'plaintext (no insecure key)'};"
              f" migration: {'available' if features.spares else 'not available'}"
              f" ({features.spares_why})", flush=True)
        if features.spares:
            print("asserting 0 failed requests (a spare is configured)")
        else:
            print("without migration: failures are allowed but must be clean UNAVAILABLE "
                  "naming the faulted worker; no hangs and no corrupted tokens either way")
        env = Env(args, stubs, workdir, features)
        try:
            t = time.monotonic()
            reference = collect_reference(env, specs, args.request_timeout)
            print(f"reference: {len(specs)} streams, {sum(len(r[0]) for r in reference)} tokens"
                  f" in {time.monotonic() - t:.1f} s", flush=True)
            for stage in stages:
                for fault in faults:
                    for _ in range(args.rounds):
                        rows.append(run_cell(env, stage, fault, specs, reference, f))
        finally:
            if f.n:
                print(env.cluster.logs() if env.cluster else "")
            env.close()
        why = fc.Netns.unavailable()
        ns = None
        if args.netns == "off":
            print("netns variant: off (--netns off)")
        elif why:
            print(f"netns variant: SKIPPED ({why})")
            if args.netns == "on":
                f.check(False, f"netns variant asked for but unavailable: {why}")
        else:
            try:
                ns = fc.Netns(os.getpid() % 1000)
            except subprocess.CalledProcessError as e:
                ns = None
                why = (f"setting up the namespace failed: {' '.join(e.cmd)}: "
                       f"{(e.stderr or b'').decode(errors='replace').strip()}")
                print(f"netns variant: SKIPPED ({why})")
                if args.netns == "on":
                    f.check(False, f"netns variant asked for but unavailable: {why}")
        if ns is not None:
            try:
                nenv = Env(args, stubs, workdir, features, netns=ns)
                try:
                    rows.append(run_cell(nenv, 1, "blackhole", specs, reference, f))
                finally:
                    nenv.close()
            finally:
                ns.close()
        print(f"\nfault matrix on {os.path.basename(args.model)}, {args.workers} workers"
              f"{' + 1 spare' if features.spares else ''}, 16 streams;"
              f" migration {'on' if features.spares else 'off'};"
              f" {time.monotonic() - t_begin:.0f} s in all\n")
        print(table(rows))
        if args.json_out:
            with open(args.json_out, "w") as fo:
                json.dump({"features": vars(features) | {"args": None}, "rows": rows}, fo,
                          indent=1, default=str)
        print(f"\n{f.passed} passed, {f.n} failed")
        return 1 if f.n else 0


if __name__ == "__main__":
    sys.exit(main())
