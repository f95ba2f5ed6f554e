#!/usr/bin/env python3
"""A split GGUF (NAME-0000i-of-0000N.gguf, made from --model by
scripts/split_gguf.py) on every path, each answer equal to `strata run` on
the unsplit model (greedy ids):

  - `strata run` and `strata inspect` on the split model, and llama.cpp
    (llama-cpp-python, when installed) reading the same parts;
  - `strata serve --workers 2` on it;
  - a coordinator and one worker per block (explicit placement) where each
    worker's model directory holds only part 1 (the metadata) and the parts
    its blocks' tensors live in, as an operator copies them; the
    coordinator's directory holds every part;
  - a worker whose directory lacks a part its blocks need: its LoadShard
    fails naming the part and a tensor of it (seen in the coordinator's
    report of the load).

Exit status: 0 passed, 1 failed, 77 skipped (model, grpcio or gguf absent).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))

import cluster_test as ct  # noqa: E402


class PartsCluster(ct.Cluster):
    """A Cluster whose worker i may load only from worker_dirs[i]."""

    def __init__(self, args, workdir, n_workers, worker_dirs, **kw):
        self.worker_dirs = worker_dirs
        super().__init__(args, workdir, n_workers, **kw)

    def worker_model_dirs(self, i):
        return self.worker_dirs[i]


def tensors_by_part(parts):
    """{tensor name: 0-based part index} over the split's parts."""
    import gguf
    where = {}
    for i, path in enumerate(parts):
        for t in gguf.GGUFReader(path).tensors:
            where[t.name] = i
    return where


def shard_parts(where, first, last, n_layer):
    """The 0-based parts holding the tensors of blocks [first, last) (with the
    embedding on the first stage, the output norm and head on the last)."""
    need = {0}
    for name, part in where.items():
        if name.startswith("blk."):
            b = int(name.split(".")[1])
            if first <= b < last:
                need.add(part)
        elif name == "token_embd.weight":
            if first == 0 or (last == n_layer and "output.weight" not in where):
                need.add(part)
        elif name in ("output_norm.weight", "output.weight"):
            if last == n_layer:
                need.add(part)
        else:
            need.add(part)  # rope_freqs and the like: every stage
    return need


def run_ids(args, model, prompt):
    out = subprocess.run([args.strata, "run", "-m", model, "-p", prompt,
                          "-n", str(ct.N_TOKENS), "--ignore-eos", "-t", "1", "-c", "512",
                          "--json"], capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"strata run {model} failed: {out.stderr}")
    return json.loads(out.stdout)["ids"]


def llama_cpp_ids(path, prompt):
    """llama.cpp's greedy ids for `prompt` on the model at `path`; None
    without llama-cpp-python."""
    try:
        from llama_cpp import Llama
        import numpy as np
    except ImportError:
        return None
    llm = Llama(model_path=path, n_ctx=128, logits_all=True, verbose=False, n_threads=1)
    llm.eval(llm.tokenize(prompt.encode(), add_bos=True))
    ids = []
    for _ in range(ct.N_TOKENS):
        ids.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
        llm.eval([ids[-1]])
    return ids


def check_answers(f, stubs, c, expected, name):
    try:
        api = ct.Api(c.address, *stubs)
        api.wait_state(stubs[0].HealthResponse.SERVING, 180)
        for p, want in zip(ct.PROMPTS, expected):
            ids, done, err = api.generate(p, ct.N_TOKENS)
            f.check(err is None and ids == want and done is not None,
                    f"{name}: {p[:24]!r}: {ids} == strata run {want}"
                    + (f" (error {err})" if err else ""))
    finally:
        if f.n:
            print(c.logs())
        c.close()


def load_error(api, pb, name, timeout=120):
    """The first load error the coordinator reports for worker `name`
    (ClusterStatus' last_error), polled until it comes."""
    import time
    end = time.time() + timeout
    while time.time() < end:
        try:
            for w in api.stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).workers:
                if w.name == name and w.last_error:
                    return w.last_error
        except api.grpc.RpcError:
            pass
        time.sleep(0.2)
    return ""


def main():
    ap = argparse.ArgumentParser()
    for a in ("--strata", "--worker", "--coordinator", "--model", "--proto-dir"):
        ap.add_argument(a, required=True)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        skip_why = f"{args.model} absent (scripts/make-test-models.sh)"
        ct.skip(skip_why)
    try:
        import gguf  # noqa: F401
        import split_gguf
    except ImportError:
        ct.skip("the gguf Python package is absent (scripts/install-test-tools.sh)")
    n_layer = ct.n_layer_of(args.model)
    f = ct.Failures()
    with tempfile.TemporaryDirectory(prefix="strata-split-") as workdir:
        stubs = ct.load_stubs(args.proto_dir, workdir)
        all_dir = os.path.join(workdir, "all")
        os.makedirs(all_dir)
        import gguf
        n_tensors = len(gguf.GGUFReader(args.model).tensors)
        # About five parts: blocks straddle parts, as gguf-split cuts them.
        parts = split_gguf.split(args.model, os.path.join(all_dir, "split"),
                                 max(1, n_tensors // 5 + 1))
        print(f"split into {len(parts)} parts", flush=True)
        expected = [run_ids(args, args.model, p) for p in ct.PROMPTS]

        # One process: strata run (any part named) and strata inspect.
        for named in (parts[0], parts[-1]):
            got = [run_ids(args, named, p) for p in ct.PROMPTS]
            f.check(got == expected, f"strata run {os.path.basename(named)}: "
                    f"{got} == unsplit {expected}")
        # The parts as llama.cpp reads a gguf-split model (when installed).
        ref = llama_cpp_ids(parts[0], ct.PROMPTS[0])
        if ref is not None:
            f.check(ref == expected[0], f"llama.cpp on the split parts: {ref} == {expected[0]}")
        out = subprocess.run([args.strata, "inspect", parts[0]], capture_output=True,
                             text=True, timeout=60)
        f.check(out.returncode == 0 and f"{len(parts)} parts" in out.stdout,
                f"strata inspect names the {len(parts)} parts: {out.stdout[:200]!r}")

        # strata serve --workers 2 on the split model.
        serve_args = argparse.Namespace(**vars(args))
        serve_args.model = parts[0]
        check_answers(f, stubs, ct.Serve(serve_args, workdir, 2), expected,
                      "strata serve --workers 2")

        # One worker per block, each directory holding only its parts. The
        # coordinator opens every part (relative name, from all_dir); the
        # workers resolve the same name in their own directories.
        where = tensors_by_part(parts)
        ranges = [(b, b + 1) for b in range(n_layer)]
        dirs, absent = [], 0
        for i, (a, b) in enumerate(ranges):
            d = os.path.join(workdir, f"w{i}-models")
            os.makedirs(d)
            need = shard_parts(where, a, b, n_layer)
            absent += len(parts) - len(need)
            for p in sorted(need):
                os.link(parts[p], os.path.join(d, os.path.basename(parts[p])))
            print(f"worker {i} blocks [{a},{b}): parts "
                  f"{[p + 1 for p in sorted(need)]} of {len(parts)}", flush=True)
            dirs.append(d)
        f.check(absent > 0, f"the workers lack {absent} parts between them")
        cluster_args = argparse.Namespace(**vars(args))
        cluster_args.model = os.path.basename(parts[0])
        cwd = os.getcwd()
        os.chdir(all_dir)
        try:
            check_answers(f, stubs, PartsCluster(cluster_args, workdir, n_layer, dirs,
                                                 ranges=ranges),
                          expected, f"{n_layer} workers, each with only its parts")
            # Each worker says which parts it did without.
            for i in range(n_layer):
                with open(os.path.join(workdir, f"worker-{i}.log"), errors="replace") as log:
                    text = log.read()
                lacks = len(parts) - len(os.listdir(dirs[i]))
                f.check(lacks == 0 or f"{len(parts) - lacks} of {len(parts)} parts on this disk"
                        in text, f"worker {i} logs the {lacks} parts it lacks")
            # The last worker without a part its block needs.
            last = n_layer - 1
            blk = sorted((n, p) for n, p in where.items()
                         if n.startswith(f"blk.{last}.") and p > 0)
            if blk:
                name, p = blk[0]
                os.unlink(os.path.join(dirs[last], os.path.basename(parts[p])))
                c = PartsCluster(cluster_args, workdir, n_layer, dirs, ranges=ranges)
                try:
                    message = load_error(ct.Api(c.address, *stubs), stubs[0], f"w{last}")
                    part_base = os.path.basename(parts[p])
                    f.check(part_base in message and "absent" in message
                            and "blk." in message,
                            f"a missing part is named with a tensor: {message[:400]!r}")
                    if part_base not in message:
                        print(c.logs())
                finally:
                    c.close()
        finally:
            os.chdir(cwd)
    print(f"{f.passed} passed, {f.n} failed")
    return 1 if f.n else 0


if __name__ == "__main__":
    sys.exit(main())
