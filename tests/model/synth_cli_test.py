#!/usr/bin/env python3
"""`strata synth` end to end: small random-weight models of each type
written by the command open in `strata inspect`, `strata run` generates
tokens from them, and, where llama-cpp-python is installed, the greedy
tokens equal llama.cpp's on the same file (a divergence counts only where
llama.cpp's own top-2 logits are within 0.5: a tie).

Exit status: 0 passed, 1 failed.
Usage: synth_cli_test.py --strata BIN
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

N = 8
PROMPT = "Once upon a time"
TIE = 0.5
CASES = [("tiny-llama", t, []) for t in ["F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K",
                                          "Q6_K"]]
CASES += [("smollm2-135m", "Q4_0", ["--blocks", "2"]), ("llama-3-8b", "Q4_K", ["--blocks", "1"])]
# The mixtures: llama.cpp's llama architecture with 3-D expert tensors.
CASES += [("tiny-mixtral", "Q4_K_M", []), ("mixtral-8x7b", "Q4_K_M", ["--blocks", "1"])]
# Type names in any case, the mix's too.
CASES += [("tiny-mixtral", "q4_k_m", [])]


def llama_cpp_ids(path):
    try:
        from llama_cpp import Llama
        import numpy as np
    except ImportError:
        return None, None
    llm = Llama(model_path=path, n_ctx=64, logits_all=True, verbose=False, n_threads=1)
    prompt = llm.tokenize(PROMPT.encode(), add_bos=True)
    llm.eval(prompt)
    ids, gaps = [], []
    for _ in range(N):
        row = np.array(llm.scores[llm.n_tokens - 1])
        top2 = np.sort(row)[-2:]
        ids.append(int(row.argmax()))
        gaps.append(float(top2[1] - top2[0]))
        llm.eval([ids[-1]])
    return ids, gaps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="strata-synth-") as d:
        for shape, type_, extra in CASES:
            path = os.path.join(d, f"{shape}-{type_}.gguf")
            name = f"{shape} {type_} {' '.join(extra)}".strip()
            out = subprocess.run([args.strata, "synth", "--shape", shape, "--type", type_,
                                  "-o", path, *extra], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"FAIL {name}: synth: {out.stderr}")
                failed += 1
                continue
            print(f"     {out.stdout.strip()}")
            out = subprocess.run([args.strata, "inspect", path], capture_output=True, text=True)
            if out.returncode != 0:
                print(f"FAIL {name}: inspect: {out.stderr}")
                failed += 1
                continue
            out = subprocess.run([args.strata, "run", "-m", path, "-p", PROMPT, "-n", str(N),
                                  "--ignore-eos", "-t", "1", "--json"],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print(f"FAIL {name}: run: {out.stderr}")
                failed += 1
                continue
            ids = json.loads(out.stdout)["ids"]
            if len(ids) != N:
                print(f"FAIL {name}: {len(ids)} tokens, expected {N}")
                failed += 1
                continue
            ref, gaps = llama_cpp_ids(path)
            if ref is None:
                print(f"ok   {name}: strata run {ids} (llama-cpp-python absent: not compared)")
                continue
            first = next((i for i in range(N) if ids[i] != ref[i]), None)
            if first is None:
                print(f"ok   {name}: strata run {ids} == llama.cpp")
            elif gaps[first] < TIE:
                print(f"ok   {name}: strata run {ids}, llama.cpp {ref}: a tie at token {first} "
                      f"(gap {gaps[first]:.3f})")
            else:
                print(f"FAIL {name}: strata run {ids} != llama.cpp {ref} at token {first} "
                      f"(gap {gaps[first]:.3f})")
                failed += 1
        failed += check_sparse(args.strata, d)
    print(f"{len(CASES) + len(SPARSE) + 1 - failed} passed, {failed} failed")
    return 1 if failed else 0


# `synth --sparse`: the published models' header-only files, at their
# published sizes (the GGUFs on Hugging Face: bartowski's Llama 3.3 70B and
# Qwen2.5 72B Q4_K_M, ggml-org's gpt-oss-120b), each 0.2 % or closer, with
# almost nothing on disk; `strata inspect` reads them.
SPARSE = [("llama-3.3-70b-q4_k_m", 42.5e9), ("qwen2.5-72b-q4_k_m", 47.4e9),
          ("gpt-oss-120b-mxfp4", 63.4e9)]


def check_sparse(strata, d):
    failed = 0
    for shape, size in SPARSE:
        path = os.path.join(d, f"{shape}.gguf")
        out = subprocess.run([strata, "synth", "--sparse", "--shape", shape, "-o", path],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"FAIL sparse {shape}: {out.stderr}")
            failed += 1
            continue
        st = os.stat(path)
        insp = subprocess.run([strata, "inspect", path], capture_output=True, text=True)
        if abs(st.st_size - size) > 0.002 * size or st.st_blocks * 512 > (1 << 22) \
                or insp.returncode != 0:
            print(f"FAIL sparse {shape}: {st.st_size} bytes (published {size:.3g}), "
                  f"{st.st_blocks * 512} on disk, inspect rc {insp.returncode}")
            failed += 1
            continue
        print(f"ok   sparse {shape}: {st.st_size / 1e9:.2f} GB, {st.st_blocks * 512} B on disk")
    # Refused: a published layout without --sparse (mixed types), --sparse on a
    # random shape, --type with --sparse.
    bad = [["--shape", "llama-3.3-70b-q4_k_m"], ["--sparse", "--shape", "tiny-llama"],
           ["--sparse", "--shape", "gpt-oss-120b-mxfp4", "--type", "Q8_0"]]
    refused = True
    for argv in bad:
        out = subprocess.run([strata, "synth", *argv, "-o", os.path.join(d, "bad.gguf")],
                             capture_output=True, text=True)
        if out.returncode != 2 or os.path.exists(os.path.join(d, "bad.gguf")):
            print(f"FAIL synth {' '.join(argv)}: rc {out.returncode} (expected 2), {out.stderr}")
            refused = False
    if refused:
        print("ok   sparse refusals")
    return failed + (0 if refused else 1)


if __name__ == "__main__":
    sys.exit(main())
