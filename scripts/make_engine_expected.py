#!/usr/bin/env python3
"""Writes llama.cpp's outputs that the engine tests compare strata against.

For every model and prompt: llama.cpp (through llama-cpp-python, CPU, 1
thread, no flash attention, f16 KV cache) tokenizes the prompt, generates
64 tokens greedily one at a time (free-running), then is fed the whole
sequence (prompt + generated) in one batch with logits for every position
(teacher forcing). Written per model, to tests/engine/data/MODEL.json:

  {"model": file name, "sha256": of the GGUF, "llama_cpp_python": version,
   "ggml": library version, "n_generate": 64,
   "cases": [{"name", "text", "prompt_ids", "ids" (the 64 greedy ids),
              "argmax" (teacher-forced argmax at every position of
                        prompt_ids + ids[:-1]),
              "gap" (llama.cpp's own top-1 minus top-2 logit there),
              "last_top" ([[id, logit], ...] the 64 largest logits at the
                          last prompt position, free-running run)}]}

The full last-position logits of every case go to --full-logits-dir (not
committed; f32 little-endian, CASE.f32) for the full-vector comparison the
test reports when it finds them.

The requantized SmolLM2 variants are made with `strata quantize` (--strata)
into --requant-dir first; their sha256 is recorded so the test skips a file
that differs.

Usage:
  ~/.cache/strata/venv/bin/python scripts/make_engine_expected.py \
      --strata build-engine/client/cli/strata [--only smollm2-q4_1] [--bench]
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

MODELS_DIR = os.path.expanduser("~/.cache/strata/models")
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "..", "tests", "engine", "data")
N_GENERATE = 64
TOP = 64

LONG_TEXT = (
    "The history of the lighthouse is a history of people who refused to let "
    "the sea have the last word. Long before electric lamps, keepers climbed "
    "narrow stairs every evening to trim wicks, polish lenses and watch the "
    "horizon for ships in trouble. The earliest lights were simple fires on "
    "hilltops, built by fishermen's families who wanted their boats to find "
    "the harbour after dark. Later, towers of stone rose on rocky points, and "
    "their builders learned how to set foundations on reefs that were covered "
    "by the tide twice a day. One of the most famous of these towers stood on "
    "a reef far from the coast, where storms had destroyed two earlier "
    "buildings. Its engineer studied the way oak trees resist the wind and "
    "shaped his tower the same way: wide at the base, narrowing as it rose, "
    "with blocks of granite cut to lock into one another like pieces of a "
    "puzzle. The tower survived for more than a century. In the nineteenth "
    "century a French physicist designed a new kind of lens made of "
    "concentric rings of glass. It was lighter than a solid lens and could "
    "gather almost all of the light from a lamp into a single bright beam "
    "that could be seen for twenty miles or more. Each lighthouse was given "
    "its own pattern of flashes so that sailors could tell one from another "
    "at night: two short flashes every ten seconds, for example, or a long "
    "steady light followed by darkness. Keepers kept logbooks in which they "
    "recorded the weather, the passing ships and the oil they burned. Their "
    "lives were lonely, and many of them brought their families to live on "
    "the rocks with them. Children learned to row before they could read, "
    "and supply boats sometimes could not reach them for weeks during winter "
    "storms. Today almost every lighthouse is automatic. Sensors switch the "
    "lamps on at dusk, and satellites guide most ships, yet the towers still "
    "stand along the coasts, and many have become museums where visitors "
    "climb the same stairs the keepers once climbed. From the top, looking "
    "out over the water, it is easy to understand why people built them and "
    "why"
)

PROMPTS = [
    ("story", "Once upon a time, in a small village"),
    ("capital", "The capital of France is"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("question", "Question: Why is the sky blue during the day and red at "
                 "sunset? Answer:"),
    ("list", "Here is a list of ten fruits, one per line:\n1. Apple\n2."),
    ("german", "Die Katze sitzt auf dem Fenster und schaut hinaus. Draußen"),
    ("recipe", "To bake a simple loaf of bread you need flour, water, salt "
               "and yeast. First, mix the flour and the salt in a large bowl. "
               "Then dissolve the yeast in warm water and pour it into the "
               "flour. Knead the dough for about ten minutes until it is "
               "smooth and elastic. Next,"),
    ("lighthouse", LONG_TEXT),
]

REQUANT_TYPES = ["Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"]
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def ggml_version():
    import llama_cpp
    lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    for name in sorted(os.listdir(lib)):
        m = re.match(r"libggml\.so\.(\d+\.\d+\.\d+)$", name)
        if m:
            return m.group(1)
    return "unknown"


def open_llama(path, n_ctx=1024, threads=1):
    from llama_cpp import Llama
    return Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_ubatch=512,
                 n_threads=threads, n_threads_batch=threads, logits_all=True,
                 flash_attn=False, verbose=False)


def run_case(llm, name, text, full_dir, key):
    prompt = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    # Free-running greedy, one token per decode step.
    llm.reset()
    llm.eval(prompt)
    last = np.array(llm.scores[len(prompt) - 1], dtype=np.float32)
    ids = []
    for _ in range(N_GENERATE):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        ids.append(tok)
        if len(ids) == N_GENERATE:
            break
        llm.eval([tok])
    # Teacher forcing: the whole sequence in one batch.
    seq = prompt + ids[:-1]
    llm.reset()
    llm.eval(seq)
    scores = np.array(llm.scores[: len(seq)], dtype=np.float32)
    argmax = scores.argmax(axis=1)
    part = np.partition(scores, -2, axis=1)
    gap = part[:, -1] - part[:, -2]
    order = np.argsort(-last)[:TOP]
    if full_dir:
        os.makedirs(full_dir, exist_ok=True)
        last.astype("<f4").tofile(os.path.join(full_dir, f"{key}.{name}.f32"))
    return {
        "name": name,
        "text": text,
        "prompt_ids": [int(t) for t in prompt],
        "ids": ids,
        "argmax": [int(a) for a in argmax],
        "gap": [round(float(g), 4) for g in gap],
        "last_top": [[int(i), round(float(last[i]), 5)] for i in order],
    }


def make_model_data(key, path, full_dir, prompts):
    import llama_cpp
    llm = open_llama(path)
    cases = []
    for name, text in prompts:
        t0 = time.time()
        cases.append(run_case(llm, name, text, full_dir, key))
        print(f"  {key}/{name}: {len(cases[-1]['prompt_ids'])} prompt tokens,"
              f" {time.time() - t0:.1f}s", file=sys.stderr)
    data = {
        "model": os.path.basename(path),
        "sha256": sha256(path),
        "llama_cpp_python": llama_cpp.__version__,
        "ggml": ggml_version(),
        "settings": "CPU, 1 thread, n_batch 512, flash_attn off, f16 KV",
        "n_generate": N_GENERATE,
        "cases": cases,
    }
    out = os.path.join(DATA_DIR, f"{key}.json")
    with open(out, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}", file=sys.stderr)


def bench(path, n_prompt=128, n_gen=64):
    """Prefill and decode tok/s of llama.cpp with 2 threads."""
    llm = open_llama(path, threads=2)
    llm.reset()
    tokens = llm.tokenize(LONG_TEXT.encode(), add_bos=True)[:n_prompt]
    llm.eval(tokens[:8])  # warm up
    llm.reset()
    t0 = time.time()
    llm.eval(tokens)
    t1 = time.time()
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    for _ in range(n_gen):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t2 = time.time()
    return len(tokens) / (t1 - t0), n_gen / (t2 - t1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", help="the strata binary (for requantizing)")
    ap.add_argument("--requant-dir", default=os.path.join(MODELS_DIR, "requant"))
    ap.add_argument("--full-logits-dir",
                    default=os.path.expanduser("~/.cache/strata/engine-expected"))
    ap.add_argument("--only", help="one model key")
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()

    models = [("smollm2-q4_1", os.path.join(MODELS_DIR, SMOLLM2), PROMPTS),
              ("gemma3-q4_k_m", os.path.join(MODELS_DIR, GEMMA3), PROMPTS)]
    for t in REQUANT_TYPES:
        models.append((f"smollm2-{t.lower()}",
                       os.path.join(args.requant_dir,
                                    f"SmolLM2-135M-Instruct.{t}.gguf"),
                       PROMPTS[:4]))
    tiny_dir = os.path.join(MODELS_DIR, "tiny")
    for arch in ["qwen2", "qwen3", "gemma2", "phi3",
                 "mixtral", "qwen2moe", "qwen3moe", "olmoe", "gpt-oss"]:
        models.append((f"tiny-{arch}", os.path.join(tiny_dir, f"tiny-{arch}.gguf"),
                       PROMPTS[:4]))

    for key, path, prompts in models:
        if args.only and key != args.only:
            continue
        if key.startswith("smollm2-") and key != "smollm2-q4_1":
            if not os.path.exists(path):
                if not args.strata:
                    print(f"skip {key}: {path} absent (pass --strata)", file=sys.stderr)
                    continue
                os.makedirs(os.path.dirname(path), exist_ok=True)
                subprocess.run([args.strata, "quantize",
                                os.path.join(MODELS_DIR, SMOLLM2), path,
                                key.split("-")[1].upper()], check=True)
        if key.startswith("tiny-") and not os.path.exists(path):
            subprocess.run([sys.executable, os.path.join(HERE, "make_tiny_models.py"),
                            "--out", tiny_dir], check=True)
        if not os.path.exists(path):
            print(f"skip {key}: {path} absent", file=sys.stderr)
            continue
        print(f"{key}: {path}", file=sys.stderr)
        if args.bench:
            pp, tg = bench(path)
            print(f"{key}: llama.cpp prefill {pp:.1f} tok/s, decode {tg:.1f} tok/s")
            continue
        make_model_data(key, path, args.full_logits_dir, prompts)


if __name__ == "__main__":
    main()
