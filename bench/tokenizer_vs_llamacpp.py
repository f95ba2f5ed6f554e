#!/usr/bin/env python3
"""Tokenizer throughput, strata against llama.cpp, on the same GGUF and the
same ~1 MB of English text (Python's own pydoc topic texts, repeated to 1 MB).

Each round times `strata tokenize -m MODEL --stdin --no-bos` (whole process,
model load included) and llama.cpp's tokenizer through llama-cpp-python
(vocab-only load included), interleaved A B A B; prints each engine's median
tokens per second, the ratio, and whether the ids are equal.

Usage: bench/tokenizer_vs_llamacpp.py STRATA_BINARY MODEL.gguf [ROUNDS]
Needs llama-cpp-python in the Python that runs it (~/.cache/strata/venv).
"""
import statistics
import subprocess
import sys
import time

import pydoc_data.topics


def english_text(n_bytes=1 << 20):
    base = "\n\n".join(pydoc_data.topics.topics.values()).encode("utf-8")
    return (base * (n_bytes // len(base) + 1))[:n_bytes].decode("utf-8", "ignore").encode()


def run_strata(strata, model, text):
    t0 = time.perf_counter()
    out = subprocess.run([strata, "tokenize", "-m", model, "--stdin", "--no-bos"],
                         input=text, capture_output=True, check=True).stdout
    return time.perf_counter() - t0, [int(x) for x in out.split()]


def run_llama(model, text):
    import llama_cpp
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    ids = llm.tokenize(text, add_bos=False, special=False)
    elapsed = time.perf_counter() - t0
    del llm
    return elapsed, ids


def main():
    strata, model = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    text = english_text()
    ours, theirs, same = [], [], True
    for _ in range(rounds):
        t_a, ids_a = run_strata(strata, model, text)
        t_b, ids_b = run_llama(model, text)
        same &= ids_a == ids_b
        ours.append(len(ids_a) / t_a)
        theirs.append(len(ids_b) / t_b)
    ratios = [a / b for a, b in zip(ours, theirs)]
    print(f"{model}: {len(text)} bytes, {len(ids_a)} tokens, ids equal: {same}")
    print(f"  strata    median {statistics.median(ours):12.0f} tok/s")
    print(f"  llama.cpp median {statistics.median(theirs):12.0f} tok/s")
    print(f"  ratio (strata / llama.cpp) median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
