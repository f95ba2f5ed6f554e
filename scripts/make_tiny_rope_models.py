#!/usr/bin/env python3
"""Writes small random-weight GGUFs with RoPE scaling, so strata's RoPE can
be held to llama.cpp's on each kind (scripts/make_engine_expected.py,
tests/engine/llama_cpp_agreement_test.cc). The keys are those llama.cpp's
converter (convert_hf_to_gguf.py) writes for each HF rope_scaling:

  tiny-llama3        llama with `rope_freqs.weight`: Llama 3.1's frequency
                     factors by Meta's formula (rope_type "llama3": factor 8,
                     low_freq_factor 1, high_freq_factor 4), with
                     original_max_position_embeddings 64 so that all three
                     regimes (kept, interpolated, divided by 8) cover the
                     32-wide heads; no rope.scaling keys (the converter
                     writes none for llama3), rope.freq_base 500000
  tiny-llama-linear  llama, rope.scaling.type linear, factor 4
  tiny-qwen2-yarn    qwen2 (q/k/v biases), rope.scaling.type yarn, factor 4,
                     original_context_length 32 (Qwen2.5's YaRN keys): every
                     test prompt, with its 64 generated tokens, runs past the
                     original context, the lighthouse case (~420 tokens) far
                     past it; rope.freq_base 1000000 as Qwen2.5's

Each model: 3 layers, n_embd 128, 4 heads / 2 KV heads, head 32, FFN 256,
SmolLM2's tokenizer (copied with make_tiny_models.py's helpers), a separate
output head; matrices F16 or Q8_0 by layer, vectors F32; seeded, so the
files (and the SHA-256 in tests/engine/data/*.json) are reproducible.

Usage: make_tiny_rope_models.py --out DIR [--smollm2 PATH]
"""
import argparse
import math
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import copy_tokenizer, tokenizer_fields, write_file  # noqa: E402

N_LAYER = 3
N_EMBD = 128
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 32
N_FF = 256
CTX = 2048

# name: (architecture, rope.freq_base, seed)
MODELS = {
    "llama3": ("llama", 500000.0, 2000),
    "llama-linear": ("llama", 10000.0, 2001),
    "qwen2-yarn": ("qwen2", 1000000.0, 2002),
}

LLAMA3_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}
LINEAR_FACTOR = 4.0
YARN_FACTOR = 4.0
YARN_ORIG_CTX = 32


def llama3_rope_factors(base, dim, s):
    """Meta's Llama 3.1 frequency factors (apply_scaling in llama-models;
    llama.cpp's converter writes them as rope_freqs.weight): 1 for short
    wavelengths, `factor` for long ones, a smooth blend between."""
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    low_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
    high_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(s["factor"])
        else:
            smooth = ((s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"])
                      / (s["high_freq_factor"] - s["low_freq_factor"]))
            out.append(1.0 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def make(name, out_dir, tok, n_vocab):
    arch, base, seed = MODELS[name]
    rng = np.random.default_rng(seed)
    path = os.path.join(out_dir, f"tiny-{name}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny random {name}")
    w.add_block_count(N_LAYER)
    w.add_context_length(CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(base)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_file_type(1)
    if name == "llama-linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(LINEAR_FACTOR)
    if name == "qwen2-yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(YARN_FACTOR)
        w.add_rope_scaling_orig_ctx_len(YARN_ORIG_CTX)
    copy_tokenizer(w, tok)

    def mat(tname, n_out, n_in, scale=1.0, qtype=None):
        a = (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)
        if qtype == "Q8_0":
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(tname, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(tname, a.astype(np.float16))

    def vec(tname, n, center=1.0, spread=0.1):
        w.add_tensor(tname, (center + spread * rng.standard_normal(n)).astype(np.float32))

    q_rows = N_HEAD * HEAD_DIM
    kv_rows = N_HEAD_KV * HEAD_DIM
    if name == "llama3":  # first, as the converter yields it
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(base, HEAD_DIM, LLAMA3_SCALING))
    emb = rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32)
    w.add_tensor("token_embd.weight",
                 gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    vec("output_norm.weight", N_EMBD)
    mat("output.weight", n_vocab, N_EMBD, scale=4.0, qtype="Q8_0")
    for il in range(N_LAYER):
        p = f"blk.{il}."
        qt = "Q8_0" if il % 2 == 0 else None
        vec(p + "attn_norm.weight", N_EMBD)
        # Larger q/k: attention that depends on the rotation, so a wrong
        # RoPE shows in the tokens.
        mat(p + "attn_q.weight", q_rows, N_EMBD, 3.0, qt)
        mat(p + "attn_k.weight", kv_rows, N_EMBD, 3.0, qt)
        mat(p + "attn_v.weight", kv_rows, N_EMBD, 1.0, qt)
        if arch == "qwen2":
            vec(p + "attn_q.bias", q_rows, 0.0, 0.5)
            vec(p + "attn_k.bias", kv_rows, 0.0, 0.5)
            vec(p + "attn_v.bias", kv_rows, 0.0, 0.5)
        mat(p + "attn_output.weight", N_EMBD, q_rows, 1.0, qt)
        vec(p + "ffn_norm.weight", N_EMBD)
        mat(p + "ffn_gate.weight", N_FF, N_EMBD, 2.0, qt)
        mat(p + "ffn_up.weight", N_FF, N_EMBD, 2.0, qt)
        mat(p + "ffn_down.weight", N_EMBD, N_FF, 1.0, qt)
    write_file(w, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--smollm2", default=os.path.expanduser(
        "~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--only", choices=sorted(MODELS), help="one model")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tok = tokenizer_fields(args.smollm2)
    n_vocab = len(tok["tokenizer.ggml.tokens"].data)
    for name in MODELS:
        if args.only is None or name == args.only:
            make(name, args.out, tok, n_vocab)


if __name__ == "__main__":
    main()
