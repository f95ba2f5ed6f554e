#!/usr/bin/env python3
"""A Kubernetes overlay run for real, on loopback: `kubectl kustomize` renders
the overlay (deploy/k8s/overlays/smollm2-cpu by default); this test takes
what a cluster would run from the rendered objects — the LeaderWorkerSet's
leader and worker containers (command, args, env, volume mounts, init
containers), the ConfigMap's files, the Secrets' keys as docs/deploy.md has
an operator create them, the model volume — and starts those very commands
with the real binaries, changing only what a single machine needs changed:

  - addresses: the configs' listen addresses become 127.0.0.1 with free
    ports; the coordinator's `workers:` (the LeaderWorkerSet's stable DNS
    names, which do not resolve here) becomes the list of those loopback
    addresses, with the names the LeaderWorkerSet form gives (w1 .. wN-1);
  - mount paths: each volumeMount's path becomes a folder of this test
    (the ConfigMap's files, the certificates, the model folder, emptyDirs).

It then checks, as the cluster would: each init container exits 0 (the
model's SHA-256 check; and it exits non-zero on a model with one byte
changed); the leader's readiness probe (its HTTP GET) answers 200 once the
shards load; `strata status` exits 0; and a generation through the
coordinator gives the greedy ids of `strata run` on the same GGUF.

Environment the LeaderWorkerSet controller would set is set here the same
way: LWS_LEADER_ADDRESS (<lws>-0.<lws>.<namespace>), LWS_GROUP_SIZE,
LWS_WORKER_INDEX; downward-API values (fieldRef, resourceFieldRef) as the
kubelet computes them; secretKeyRef from the Secrets this test creates.

Exit status: 0 passed, 1 failed, 77 skipped (kubectl, the model or
PyYAML absent).
Usage: overlay_loopback_test.py --strata BIN --worker BIN --coordinator BIN
         --overlay DIR --model GGUF
"""
import argparse
import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from cluster_test import Proc, free_port  # noqa: E402  (the cluster tests' process helper)

SKIP = 77
PROMPT = "Once upon a time"
N_TOKENS = 16
GENEROUS = 600  # seconds: a loaded 2-core machine under a sanitizer


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def fail(why):
    print(f"FAIL: {why}")
    sys.exit(1)


try:
    import yaml
except ImportError:
    yaml = None


# ---------------------------------------------------------------- rendering

def render(overlay):
    out = subprocess.run(["kubectl", "kustomize", overlay], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"kubectl kustomize {overlay}: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs, kind):
    found = [d for d in docs if d.get("kind") == kind]
    if len(found) != 1:
        fail(f"expected one {kind} in the rendered overlay, found {len(found)}")
    return found[0]


def parse_quantity(q):
    """A Kubernetes quantity as a float (cpu in cores, memory in bytes)."""
    q = str(q)
    m = re.fullmatch(r"([0-9.]+(?:[eE][0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?", q)
    if not m:
        fail(f"not a quantity: {q}")
    scale = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
             "E": 1e18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
             "Ei": 2**60}[m.group(2)]
    return float(m.group(1)) * scale


# ------------------------------------------------------------ materializing

class Pod:
    """One pod of the group, laid out under a folder of this test: every
    volume a folder, every mount path mapped to one."""

    def __init__(self, role, spec, docs, work, secrets, model_dir, env):
        self.role = role
        self.spec = spec
        self.root = os.path.join(work, role)
        self.volumes = {}  # volume name -> local folder
        self.env = env  # the LWS controller's variables
        os.makedirs(self.root, exist_ok=True)
        for v in spec.get("volumes", []):
            path = os.path.join(self.root, "vol-" + v["name"])
            if "configMap" in v:
                cm = next((d for d in docs if d.get("kind") == "ConfigMap"
                           and d["metadata"]["name"] == v["configMap"]["name"]), None)
                if cm is None:
                    fail(f"{role}: volume {v['name']}: no ConfigMap {v['configMap']['name']}")
                os.makedirs(path)
                for key, text in cm.get("data", {}).items():
                    with open(os.path.join(path, key), "w") as f:
                        f.write(text)
            elif "secret" in v:
                name = v["secret"]["secretName"]
                if name not in secrets:
                    fail(f"{role}: volume {v['name']}: Secret {name} is not one docs/deploy.md "
                         f"has the operator create ({sorted(secrets)})")
                shutil.copytree(secrets[name], path)
            elif "persistentVolumeClaim" in v or "hostPath" in v:
                # One volume shared by every pod, as a ReadOnlyMany claim
                # is: the coordinator's model path is the workers'.
                path = model_dir
            elif "emptyDir" in v:
                os.makedirs(path)
            else:
                fail(f"{role}: volume {v['name']}: a kind this test does not lay out: {v}")
            self.volumes[v["name"]] = path

    def mounts(self, container):
        """(mountPath, local path), longest mount path first."""
        out = []
        for m in container.get("volumeMounts", []):
            local = self.volumes[m["name"]]
            if m.get("subPath"):
                local = os.path.join(local, m["subPath"])
            out.append((m["mountPath"].rstrip("/"), local))
        return sorted(out, key=lambda p: -len(p[0]))

    def remap(self, container, text):
        """Mount paths in `text` (a path, an argument, a config file) become
        this test's folders, in one pass (a folder of this test may itself
        start with a mount path, such as /tmp)."""
        mounts = dict(self.mounts(container))
        if not mounts:
            return text
        pattern = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
        return re.sub(f"(?:{pattern})(?![\\w.-])", lambda m: mounts[m.group(0)], text)

    def environment(self, container, secret_values):
        env = dict(os.environ)
        env.update(self.env)
        limits = container.get("resources", {}).get("limits", {})
        for e in container.get("env", []):
            if "value" in e:
                env[e["name"]] = self.remap(container, str(e["value"]))
            elif "valueFrom" in e:
                src = e["valueFrom"]
                if "secretKeyRef" in src:
                    ref = src["secretKeyRef"]
                    env[e["name"]] = secret_values[(ref["name"], ref["key"])]
                elif "fieldRef" in src:
                    field = src["fieldRef"]["fieldPath"]
                    env[e["name"]] = {"metadata.name": f"{self.role}-pod",
                                      "metadata.namespace": "default",
                                      "status.podIP": "127.0.0.1"}.get(field, "")
                elif "resourceFieldRef" in src:
                    ref = src["resourceFieldRef"]
                    value = parse_quantity(limits[ref["resource"].split(".", 1)[1]])
                    divisor = parse_quantity(ref.get("divisor", "1"))
                    env[e["name"]] = str(int(-(-value // divisor)))  # the kubelet rounds up
                else:
                    fail(f"{self.role}: env {e['name']}: a source this test does not know: {src}")
        return env

    def argv(self, container):
        argv = list(container.get("command", [])) + list(container.get("args", []))
        if not argv:
            fail(f"{self.role}: container {container['name']} has no command (the image "
                 "has no entrypoint)")
        return [self.remap(container, a) for a in argv]


def config_file(pod, container, argv):
    """The --config FILE of a strata process's argv (remapped)."""
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    fail(f"{pod.role}: {argv} has no --config")


def rewrite_config(pod, container, path, change):
    """Rewrites the config file at `path` (a private copy for this process):
    mount paths remapped, then `change(config dict)`."""
    with open(path) as f:
        text = pod.remap(container, f.read())
    config = yaml.safe_load(text)
    change(config)
    copy_path = path + f".{container['name']}.yaml"
    with open(copy_path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return copy_path


def run_binary(argv, binaries):
    """The image's binaries are on its PATH; here they are the build's."""
    name = os.path.basename(argv[0])
    if name not in binaries:
        fail(f"command {argv[0]} is not one of the image's programs ({sorted(binaries)})")
    return [binaries[name]] + argv[1:]


# ------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--overlay", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    if yaml is None:
        skip("PyYAML is not installed (scripts/install-test-tools.sh installs it in the venv)")
    if shutil.which("kubectl") is None:
        skip("kubectl is not installed (Debian 12 has no package of it: Kubernetes' own releases)")
    if not os.path.exists(args.model):
        skip(f"{args.model} absent (scripts/fetch-models.sh fetches it)")
    binaries = {"strata": args.strata, "strata-worker": args.worker,
                "strata-coordinator": args.coordinator}

    docs = render(args.overlay)
    lws = one(docs, "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    size = int(template["size"])
    if size < 2:
        fail(f"LeaderWorkerSet size {size}: a coordinator and at least one worker")
    leader_spec = template["leaderTemplate"]["spec"]
    worker_spec = template["workerTemplate"]["spec"]
    lws_name = lws["metadata"]["name"]
    namespace = lws["metadata"].get("namespace", "default")

    procs = []
    with tempfile.TemporaryDirectory(prefix="strata-overlay-") as work:
        try:
            run(args, binaries, docs, work, size, leader_spec, worker_spec, lws_name,
                namespace, procs)
        finally:
            for p in procs:
                p.kill()
    print("ok")
    return 0


def the_model_file(pods_config_text):
    m = re.search(r"^model:\s*(\S+)", pods_config_text, re.M)
    return m.group(1) if m else None


def run(args, binaries, docs, work, size, leader_spec, worker_spec, lws_name, namespace,
        procs):
    # The Secrets docs/deploy.md has the operator create.
    certs = os.path.join(work, "secret-certs")
    names = ["coordinator"] + [f"w{i}" for i in range(1, size)]
    out = subprocess.run([args.strata, "certs", certs, "--names", ",".join(names)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"strata certs: {out.stderr}")
    api_key = hashlib.sha256(os.urandom(16)).hexdigest()
    api_dir = os.path.join(work, "secret-api")
    os.makedirs(api_dir)
    with open(os.path.join(api_dir, "api-key"), "w") as f:
        f.write(api_key)
    secrets = {"strata-link-certs": certs, "strata-api-key": api_dir}
    secret_values = {("strata-api-key", "api-key"): api_key}

    # The model volume: the GGUF under the name the configs give.
    cm_text = "\n".join(v for d in docs if d.get("kind") == "ConfigMap"
                        for v in d.get("data", {}).values())
    model_path = the_model_file(cm_text)
    if model_path is None:
        fail("no `model:` in the ConfigMap's configs")
    model_dir = os.path.join(work, "models")
    os.makedirs(model_dir)
    # A copy (a hard link where the filesystem allows): a worker resolves
    # links before it checks a path against its model_dirs.
    target = os.path.join(model_dir, os.path.basename(model_path))
    try:
        os.link(os.path.realpath(args.model), target)
    except OSError:
        shutil.copyfile(args.model, target)

    leader_address = f"{lws_name}-0.{lws_name}.{namespace}"
    base_env = {"LWS_LEADER_ADDRESS": leader_address, "LWS_GROUP_SIZE": str(size),
                "LWS_NAME": lws_name, "LWS_GROUP_INDEX": "0"}

    worker_ports = [free_port() for _ in range(1, size)]
    worker_addresses = [(f"w{i}", f"127.0.0.1:{p}") for i, p in enumerate(worker_ports, 1)]

    # The leader.
    pod = Pod("leader", leader_spec, docs, work, secrets, model_dir,
              dict(base_env, LWS_WORKER_INDEX="0"))
    run_init_containers(pod, leader_spec, secret_values, binaries)
    container = leader_spec["containers"][0]
    argv = pod.argv(container)
    grpc_port, http_port = free_port(), free_port()

    def change_leader(c):
        c["listen"] = f"127.0.0.1:{grpc_port}"
        c["http_listen"] = f"127.0.0.1:{http_port}"
        group = c.get("workers")
        extra = {}
        if isinstance(group, dict) and "memory_budget" in group:
            extra["memory_budget"] = group["memory_budget"]
        c["workers"] = [dict({"address": a, "name": n}, **extra) for n, a in worker_addresses]
    cfg = config_file(pod, container, argv)
    new_cfg = rewrite_config(pod, container, cfg, change_leader)
    argv = [new_cfg if a == cfg else a for a in argv]
    leader_env = pod.environment(container, secret_values)
    leader = Proc("leader", run_binary(argv, binaries), work, env=leader_env)
    procs.append(leader)
    leader_container = container

    # The workers, after the leader: the coordinator must wait for workers
    # that are not up yet (a LeaderWorkerSet starts the group's pods at once).
    for index in range(1, size):
        env = dict(base_env, LWS_WORKER_INDEX=str(index))
        pod = Pod(f"worker-{index}", worker_spec, docs, work, secrets, model_dir, env)
        run_init_containers(pod, worker_spec, secret_values, binaries)
        container = worker_spec["containers"][0]
        argv = pod.argv(container)
        port = worker_ports[index - 1]

        def change(c, port=port):
            if "listen" not in c:
                fail("the worker config has no listen:")
            c["listen"] = f"127.0.0.1:{port}"
        cfg = config_file(pod, container, argv)
        new_cfg = rewrite_config(pod, container, cfg, change)
        argv = [new_cfg if a == cfg else a.replace(cfg, new_cfg) for a in argv]
        procs.append(Proc(f"worker-{index}", run_binary(argv, binaries), work,
                          env=pod.environment(container, secret_values)))

    # Readiness as the kubelet asks it: the leader's probe.
    probe = leader_container.get("readinessProbe")
    if not probe or "httpGet" not in probe:
        fail(f"the leader has no HTTP readiness probe: {probe}")
    path = probe["httpGet"].get("path", "/")
    url = f"http://127.0.0.1:{http_port}{path}"
    deadline = time.monotonic() + GENEROUS
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline or any(not p.alive() for p in procs):
            fail(f"readiness probe {url} never answered 200; leader log:\n{leader.tail()}")
        time.sleep(0.2)  # polling, with a deadline: not a wait that must suffice
    print(f"ok   readiness probe {path} answers 200 (cluster of {len(worker_addresses)} workers)")

    server = f"127.0.0.1:{grpc_port}"
    st = subprocess.run([args.strata, "status", "--server", server, "--api-key", api_key],
                        capture_output=True, text=True, env=leader_env)
    if st.returncode != 0:
        fail(f"strata status exited {st.returncode}: {st.stdout}{st.stderr}")
    print("ok   strata status exits 0")

    gen = subprocess.run([args.strata, "generate", "--server", server, "--api-key", api_key,
                          "-p", PROMPT, "-n", str(N_TOKENS), "--json"],
                         capture_output=True, text=True)
    if gen.returncode != 0:
        fail(f"strata generate: {gen.stderr}")
    ref = subprocess.run([args.strata, "run", "-m", args.model, "-p", PROMPT, "-n", str(N_TOKENS),
                          "-t", "1", "--json"], capture_output=True, text=True)
    if ref.returncode != 0:
        fail(f"strata run: {ref.stderr}")
    got, want = json.loads(gen.stdout)["ids"], json.loads(ref.stdout)["ids"]
    if got != want:
        fail(f"the overlay's cluster generated {got}, strata run {want}")
    print(f"ok   generated {len(got)} tokens through the overlay's cluster == strata run")


def run_init_containers(pod, spec, secret_values, binaries):
    for init in spec.get("initContainers", []):
        argv = pod.argv(init)
        if os.path.basename(argv[0]) in binaries:
            argv = run_binary(argv, binaries)
        env = pod.environment(init, secret_values)
        out = subprocess.run(argv, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            fail(f"{pod.role}: init container {init['name']} exited {out.returncode}: "
                 f"{out.stdout}{out.stderr}")
        print(f"ok   {pod.role}: init container {init['name']} exits 0")
        check_init_refuses_a_changed_model(pod, init, argv, env)


def check_init_refuses_a_changed_model(pod, init, argv, env):
    """Every init container that reads the model volume must fail when the
    GGUF differs by one byte (the SHA-256 check)."""
    model_mounts = [(m, l) for m, l in pod.mounts(init)
                    if os.path.isdir(l) and any(f.endswith(".gguf") for f in os.listdir(l))]
    for mount, local in model_mounts:
        for name in os.listdir(local):
            if not name.endswith(".gguf"):
                continue
            target = os.path.join(local, name)
            real = os.path.realpath(target)
            bad_dir = tempfile.mkdtemp(dir=pod.root)
            bad = os.path.join(bad_dir, name)
            shutil.copyfile(real, bad)  # a copy: the shared file stays intact
            with open(bad, "r+b") as f:
                f.seek(os.path.getsize(bad) // 2)
                b = f.read(1)
                f.seek(-1, 1)
                f.write(bytes([b[0] ^ 1]))
            bad_argv = [a.replace(local, bad_dir) for a in argv]
            bad_env = {k: v.replace(local, bad_dir) for k, v in env.items()}
            out = subprocess.run(bad_argv, capture_output=True, text=True, env=bad_env)
            shutil.rmtree(bad_dir)
            if out.returncode == 0:
                fail(f"{pod.role}: init container {init['name']} accepts a GGUF with one byte "
                     "changed")
            print(f"ok   {pod.role}: init container {init['name']} refuses a changed {name}")


if __name__ == "__main__":
    sys.exit(main())
