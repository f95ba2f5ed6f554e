"""A loopback cluster for fault tests and the soak bench: a coordinator and
N workers (and a spare where the build has `spares:`), each worker behind a
fault_proxy.FaultProxy, so that every link to a worker (the coordinator's
control calls, activation and Results streams, and the previous stage's
activation stream) goes through its proxy. The coordinator's config names
the proxies' addresses; a worker restarted after a kill listens on its old
port again behind the same proxy.

Also: what the binaries accept (probed once: `insecure:`, `spares:`), the
one function that writes a config's link-security lines, concurrent
Generate streams with per-token arrival times, and /proc figures of a
process. Process helpers and gRPC stubs come from cluster_test.py.
"""
import os
import shutil
import signal
import subprocess
import threading
import time

import cluster_test as ct
from fault_proxy import FaultProxy

# Health checks as the plan sets them (interval 500 ms, timeout
# 750 ms, 2 failures: a hang is noticed within ~2 s).
HEALTH = ["health_check_interval_ms: 500", "health_check_timeout_ms: 750",
          "health_check_failures: 2"]

SETPRIV = shutil.which("setpriv")


# -------------------------------------------------------------- capabilities
class Features:
    """What these binaries accept, probed once per run.

    insecure: the worker's --help mentions `insecure` (the mTLS build:
        plaintext links then need `insecure: true`, loopback only).
    certs: `strata certs` exists (for the non-loopback netns variant).
    spares: the coordinator starts with a `spares:` list instead of refusing
        the key (the migration build)."""

    def __init__(self, args, workdir):
        self.args = args
        out = subprocess.run([args.worker, "--help"], capture_output=True, text=True,
                             timeout=60)
        self.insecure = "insecure" in (out.stdout + out.stderr)
        out = subprocess.run([args.strata, "--help"], capture_output=True, text=True,
                             timeout=60)
        self.certs = "certs" in (out.stdout + out.stderr)
        self.spares, self.spares_why = self._probe_spares(workdir)

    def _probe_spares(self, workdir):
        d = os.path.join(workdir, "probe-spares")
        os.makedirs(d, exist_ok=True)
        cfg = os.path.join(d, "cluster.yaml")
        with open(cfg, "w") as f:
            f.write("\n".join(
                [f"model: {self.args.model}", f"listen: 127.0.0.1:{ct.free_port()}"]
                + link_security(self, "coordinator", loopback=True)
                + ["workers:", f"  - address: 127.0.0.1:{ct.free_port()}", "    name: w0",
                   "spares:", f"  - address: 127.0.0.1:{ct.free_port()}", "    name: s0"])
                    + "\n")
        p = subprocess.Popen([self.args.coordinator, "--config", cfg],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = [None]
            t = threading.Thread(target=lambda: line.__setitem__(0, p.stdout.readline()),
                                 daemon=True)
            t.start()
            t.join(60)
            if line[0] and line[0].startswith("listening on"):
                return True, "the coordinator accepts `spares:`"
        finally:
            p.kill()
            err = p.communicate()[1]
        why = err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}"
        return False, f"the coordinator refuses `spares:` ({why})"


def link_security(features, role, loopback=True, certs_dir=None, names=()):
    """The config lines that say how this process's links are secured: the
    one place to change when the TLS defaults change. `role` is
    "coordinator" or a worker's name. Loopback: `insecure: true` where the
    build knows the key (today's main refuses it). Not loopback: a `tls:`
    block from `strata certs` in certs_dir where the build has it; else
    nothing (plaintext, as today's main always is)."""
    if loopback:
        return ["insecure: true"] if features.insecure else []
    if not features.certs or certs_dir is None:
        return []
    return ["tls:", f"  ca: {certs_dir}/ca.pem", f"  cert: {certs_dir}/{role}.pem",
            f"  key: {certs_dir}/{role}.key",
            f"  peers: [{', '.join(n for n in ('coordinator',) + tuple(names) if n != role)}]"]


def make_certs(features, certs_dir, names):
    if features.certs:
        subprocess.run([features.args.strata, "certs", certs_dir, "--names",
                        ",".join(("coordinator",) + tuple(names))],
                       check=True, capture_output=True, timeout=120)


# ------------------------------------------------------------------- cluster
class Worker:
    """One worker: its process (restartable on the same port), its proxy."""

    def __init__(self, cluster, index, name, spare=False, netns=None, host="127.0.0.1"):
        self.cluster, self.index, self.name, self.spare = cluster, index, name, spare
        self.netns, self.host = netns, host
        self.port = ct.free_port() if netns is None else 50600 + index
        self.proc = None
        self.generation = 0
        self.start()
        if netns is None and not cluster.use_proxy:
            self.proxy = None
            self.address = f"{host}:{self.port}"
        elif netns is None:
            self.proxy = FaultProxy(self.port)
            self.proxy.start()
            self.address = self.proxy.address
        else:
            self.proxy = None            # faults come from nftables in the namespace
            self.address = f"{host}:{self.port}"

    def start(self):
        c = self.cluster
        self.generation += 1
        cfg = os.path.join(c.workdir, f"{self.name}.yaml")
        lines = [f"listen: {self.host}:{self.port}", f"name: {self.name}",
                 f"threads: {c.threads}", "memory_budget: 8GiB",
                 f"model_dirs: [{ct.model_dirs(c.args.model)}]", "answer_timeout_ms: 120000"]
        lines += link_security(c.features, self.name, loopback=c.loopback,
                               certs_dir=c.certs_dir, names=c.names)
        with open(cfg, "w") as f:
            f.write("\n".join(lines) + "\n")
        argv = [c.args.worker, "--config", cfg]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns] + argv
        if SETPRIV:
            argv = [SETPRIV, "--pdeathsig", "KILL", "--"] + argv
        self.proc = ct.Proc(f"{self.name}.{self.generation}", argv, c.workdir)
        c.procs.append(self.proc)
        return self.proc

    @property
    def pid(self):
        return self.proc.p.pid

    def signal(self, sig):
        self.proc.signal(sig)

    def wait_exit(self, timeout):
        try:
            self.proc.p.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False

    def restart(self):
        """A new process on the same port (the old one must be gone)."""
        self.proc.kill()
        return self.start()


class FaultCluster:
    """Coordinator + `n_workers` workers (+ one spare when `spare`), each
    worker behind its own proxy (none with use_proxy=False; and for
    `netns_worker=i`, worker i inside a network namespace with no proxy).
    Call close() at the end."""

    def __init__(self, args, workdir, features, n_workers, spare=False, max_sequences=16,
                 ctx=512, threads=1, netns=None, netns_worker=None, extra=(), use_proxy=True):
        self.args, self.workdir, self.features = args, workdir, features
        self.threads = threads
        self.use_proxy = use_proxy
        # One link mode for every process: with a worker off loopback the
        # coordinator needs TLS, and then every worker must speak it.
        self.loopback = netns is None
        self.procs = []
        self.names = [f"w{i}" for i in range(n_workers)] + (["s0"] if spare else [])
        self.certs_dir = None
        if netns is not None:
            self.certs_dir = os.path.join(workdir, "certs")
            make_certs(features, self.certs_dir, self.names)
        self.workers = []
        self.spares = []
        try:
            for i in range(n_workers):
                inside = netns is not None and netns_worker == i
                self.workers.append(Worker(self, i, f"w{i}",
                                           netns=netns.name if inside else None,
                                           host=netns.inner_ip if inside else "127.0.0.1"))
            if spare:
                self.spares.append(Worker(self, n_workers, "s0", spare=True))
            lines = [f"model: {args.model}", f"listen: 127.0.0.1:{ct.free_port()}",
                     f"context_length: {ctx}", f"max_sequences: {max_sequences}"]
            lines += HEALTH + list(extra)
            lines += link_security(features, "coordinator", loopback=self.loopback,
                                   certs_dir=self.certs_dir, names=self.names)
            lines.append("workers:")
            for w in self.workers:
                lines += [f"  - address: {w.address}", f"    name: {w.name}"]
            if self.spares:
                lines.append("spares:")
                for w in self.spares:
                    lines += [f"  - address: {w.address}", f"    name: {w.name}"]
            cfg = os.path.join(workdir, "cluster.yaml")
            with open(cfg, "w") as f:
                f.write("\n".join(lines) + "\n")
            argv = [args.coordinator, "--config", cfg]
            if SETPRIV:
                argv = [SETPRIV, "--pdeathsig", "KILL", "--"] + argv
            self.coordinator = ct.Proc("coordinator", argv, workdir)
            self.procs.append(self.coordinator)
            self.address = self.coordinator.address
        except BaseException:
            self.close()
            raise

    def all_workers(self):
        return self.workers + self.spares

    def close(self):
        for p in reversed(self.procs):
            try:
                p.kill()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        for w in self.all_workers():
            if w.proxy is not None:
                w.proxy.close()

    def logs(self, n=30):
        return "\n".join(f"--- {p.name} ---\n{p.tail(n)}" for p in self.procs)


# ----------------------------------------------------------------- netns
class Netns:
    """A network namespace joined to this one by a veth pair:
    host side `outer_ip`/30, namespace side `inner_ip`/30, and an nftables
    table in the namespace whose rules black-hole everything on its veth.
    Needs root, `ip` and `nft`; `Netns.unavailable()` says why not."""

    def __init__(self, tag):
        self.name = f"strata-f{tag}"
        self.outer, self.inner = f"sf{tag}a", f"sf{tag}b"
        n = 200 + tag % 50
        self.outer_ip, self.inner_ip = f"10.{n}.77.1", f"10.{n}.77.2"
        self._run("ip", "netns", "add", self.name)
        try:
            self._run("ip", "link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
            self._run("ip", "link", "set", self.inner, "netns", self.name)
            self._run("ip", "addr", "add", f"{self.outer_ip}/30", "dev", self.outer)
            self._run("ip", "link", "set", self.outer, "up")
            self._ns("ip", "addr", "add", f"{self.inner_ip}/30", "dev", self.inner)
            self._ns("ip", "link", "set", self.inner, "up")
            self._ns("ip", "link", "set", "lo", "up")
            self._ns("nft", "add", "table", "inet", "strata_fault")
            for hook in ("input", "output"):
                self._ns("nft", "add", "chain", "inet", "strata_fault", hook,
                         f"{{ type filter hook {hook} priority 0 ; policy accept ; }}")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def unavailable():
        if os.geteuid() != 0:
            return "not root"
        for tool in ("ip", "nft"):
            if shutil.which(tool) is None:
                return f"`{tool}` is not installed"
        return None

    @staticmethod
    def _run(*argv):
        subprocess.run(argv, check=True, capture_output=True, timeout=30)

    def _ns(self, *argv):
        self._run("ip", "netns", "exec", self.name, *argv)

    def blackhole(self):
        """Every packet in or out of the namespace's veth dropped, silently."""
        self._ns("nft", "add", "rule", "inet", "strata_fault", "input", "iifname", self.inner,
                 "drop")
        self._ns("nft", "add", "rule", "inet", "strata_fault", "output", "oifname", self.inner,
                 "drop")

    def heal(self):
        for hook in ("input", "output"):
            self._ns("nft", "flush", "chain", "inet", "strata_fault", hook)

    def close(self):
        subprocess.run(["ip", "link", "del", self.outer], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)


# --------------------------------------------------------------- streams
class Stream:
    """One Generate call's outcome: ids, text, done, error (code name,
    details) and times (time.monotonic()) of its first token, end and every
    delta's arrival."""

    def __init__(self, spec):
        self.spec = spec
        self.ids, self.text, self.done, self.error = [], "", None, None
        self.t_start = self.t_first = self.t_end = None
        self.times = []        # each delta's arrival
        self.ended = threading.Event()

    def max_gap(self, since):
        """The longest wait between deltas that ended after `since` (s)."""
        gaps = [b - a for a, b in zip(self.times, self.times[1:]) if b >= since]
        return max(gaps, default=0.0)


def make_request(pb, spec):
    """spec: dict(prompt, max_tokens, temperature, seed)."""
    sampling = pb.SamplingParams(temperature=spec["temperature"])
    if spec.get("seed") is not None:
        sampling.seed = spec["seed"]
    if spec["temperature"] > 0:
        sampling.top_p = 0.95
    return pb.GenerateRequest(prompt=spec["prompt"], max_tokens=spec["max_tokens"],
                              ignore_eos=True, sampling=sampling)


def run_stream(stub, pb, grpc, spec, timeout, out):
    out.t_start = time.monotonic()
    try:
        for r in stub.Generate(make_request(pb, spec), timeout=timeout):
            if r.HasField("delta"):
                now = time.monotonic()
                out.times.append(now)
                if out.t_first is None:
                    out.t_first = now
                out.ids.extend(r.delta.ids)
                out.text += r.delta.text
            else:
                out.done = r.done
    except grpc.RpcError as e:
        out.error = (e.code().name, e.details() or "")
    except Exception as e:  # noqa: BLE001 - recorded, judged by the caller
        out.error = ("CLIENT", repr(e))
    out.t_end = time.monotonic()
    out.ended.set()


def start_streams(stub, pb, grpc, specs, timeout):
    streams = [Stream(s) for s in specs]
    threads = [threading.Thread(target=run_stream, args=(stub, pb, grpc, s.spec, timeout, s),
                                daemon=True) for s in streams]
    for t in threads:
        t.start()
    return streams


class HealthMonitor:
    """Polls the coordinator's Health every `period` s on its own thread and
    keeps every change of state as (time.monotonic(), state name)."""

    def __init__(self, stub, pb, period=0.05):
        self.stub, self.pb, self.period = stub, pb, period
        self.changes = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self):
        last = None
        while not self._stop.is_set():
            try:
                h = self.stub.Health(self.pb.HealthRequest(), timeout=1)
                state = self.pb.HealthResponse.State.Name(h.state)
            except Exception as e:  # noqa: BLE001 - an unreachable coordinator is a state too
                state = f"ERROR {type(e).__name__}"
            if state != last:
                self.changes.append((time.monotonic(), state))
                last = state
            self._stop.wait(self.period)

    def state(self):
        return self.changes[-1][1] if self.changes else None

    def first_not_serving(self, since):
        for t, s in self.changes:
            if t >= since and s != "SERVING":
                return t
        return None

    def serving_again(self, since, until=None):
        """The time Health last turned SERVING after `since` (and before
        `until`): None when it never left SERVING in that span or did not
        come back."""
        span = [(t, s) for t, s in self.changes if t >= since and (until is None or t < until)]
        left = [t for t, s in span if s != "SERVING"]
        if not left:
            return None
        back = [t for t, s in span if t > left[-1] and s == "SERVING"]
        return back[0] if back else None

    def wait_serving(self, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.state() == "SERVING":
                return True
            self._stop.wait(self.period)
        return False

    def stop(self):
        self._stop.set()
        self._t.join(5)


# ------------------------------------------------------------------ /proc
def proc_figures(pid):
    """{'rss_kib', 'fds', 'threads'} of a live process, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return {"rss_kib": int(status["VmRSS"].split()[0]),
            "threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}
