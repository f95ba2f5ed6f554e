#!/usr/bin/env python3
"""How much llama.cpp disagrees with itself: the same token sequence run in
one batch (teacher-forced, logits at every position) and one token at a time
after a batched prompt (as free-running generation runs it), same GGUF, same
settings as scripts/make_engine_expected.py (CPU, 1 thread, n_batch 512, no
flash attention, f16 KV cache). Prints, per case of tests/engine/data/KEY.json,
the max and median over generated positions of max|batch - one-at-a-time|
over the vocabulary, and every position where the two runs' argmax differ
with both runs' gaps. This is the noise floor the agreement test's margin
(kTieMargin in tests/engine/llama_cpp_agreement_test.cc) lives in.

Usage:
  ~/.cache/strata/venv/bin/python scripts/llama_cpp_self_noise.py \
      --key gemma3-q4_k_m --model ~/.cache/strata/models/gemma-3-270m-q4_k_m.gguf [--cases 4]
"""
import argparse
import json
import os

import numpy as np
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True, help="tests/engine/data/KEY.json")
    ap.add_argument("--model", required=True, help="the GGUF that data was made from")
    ap.add_argument("--cases", type=int, default=8)
    args = ap.parse_args()
    with open(os.path.join(HERE, "..", "tests", "engine", "data", args.key + ".json")) as f:
        data = json.load(f)
    llm = Llama(model_path=args.model, n_ctx=1024, n_batch=512, n_threads=1,
                logits_all=True, flash_attn=False, verbose=False)
    for case in data["cases"][: args.cases]:
        prompt, ids = case["prompt_ids"], case["ids"]
        seq = prompt + ids[:-1]
        llm.reset()
        llm.eval(seq)
        batched = np.array(llm.scores[: len(seq)])
        llm.reset()
        llm.eval(prompt)
        for t in ids[:-1]:
            llm.eval([t])
        one_at_a_time = np.array(llm.scores[: len(seq)])
        n = len(prompt)
        diff = np.abs(batched - one_at_a_time).max(axis=1)[n - 1:]
        print(f"{args.key}/{case['name']} ({n} prompt tokens): max|batched - one-at-a-time| "
              f"over generated positions: max {diff.max():.3f}, median {np.median(diff):.3f}")
        for pos in range(n - 1, len(seq)):
            a, b = batched[pos], one_at_a_time[pos]
            ta, tb = int(a.argmax()), int(b.argmax())
            if ta != tb:
                print(f"  position {pos}: batched picks {ta} (by {a[ta] - a[tb]:.3f}), "
                      f"one-at-a-time picks {tb} (by {b[tb] - b[ta]:.3f})")


if __name__ == "__main__":
    main()
