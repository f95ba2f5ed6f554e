#!/usr/bin/env python3
"""Writes small random-weight GGUFs of the architectures no real model here
covers (qwen2, qwen3, gemma2, phi3), with the real key layout and each
family's special features switched on, so strata can be held to llama.cpp
on them (scripts/make_engine_expected.py).

Each model: 3 layers, n_embd 128, 4 heads / 2 KV heads (GQA), head 32, FFN
256, and SmolLM2's GPT-2 BPE tokenizer (copied from its GGUF) so prompts
tokenize to real text. Weights are seeded normal values scaled so that the
logits are peaked enough for greedy decoding to be stable; matrices F16 or
Q8_0 (mixed, to exercise both), vectors F32.

  qwen2   q/k/v biases, separate output head
  qwen3   QK-norm, key_length 32 != n_embd / n_head, tied head
  gemma2  pre/post norms, GeGLU, sqrt(n_embd) embedding scale, sliding
          window 8 (smaller than the prompts) on even layers, attention
          soft-cap 50, final soft-cap 30
  phi3    fused attn_qkv and fused gate|up (ffn_up), NeoX RoPE

Mixture-of-experts models (make_moe; 8 experts, 2 used per token; expert
tensors 3-D, ne = [n_in, n_out, n_expert], F16 or Q8_0 by layer and
projection; the router F32 as llama-quantize keeps it). The gguf package
cannot quantize K-quants (gguf.quants has no Q4_K quantizer), so no expert
here is Q4_K. Each model is checked to route different tokens to
different experts (check_routing).

  mixtral   general.architecture llama with llama.expert_count: softmax
            routing, top-2 weights renormalised, experts n_ff wide
  qwen2moe  q/k/v biases, experts expert_feed_forward_length wide, shared
            expert (expert_shared_feed_forward_length) scaled by
            sigmoid(ffn_gate_inp_shexp . x), weights not renormalised
  qwen3moe  per-head QK-norm, tied head, weights renormalised
  olmoe     RMSNorm over whole q and k rows (4 KV heads: no GQA, as
            llama.cpp's olmoe loader needs), weights not renormalised

tiny-gpt-oss.gguf (make_gpt_oss, its own seed; written last so the files
above stay byte-identical): 4 layers, n_embd 128, 8 heads / 2 KV heads of 32
(q width 256 != n_embd), q/k/v and output biases, attention sinks, sliding
window 8 on even layers, YaRN (factor 32 over an original context of 64, so
every prompt passes it), 8 experts with 2 used, MXFP4 expert matrices of
width 96 with gate/up/down biases and a biased router (check_routing with
the bias).

Usage: make_tiny_models.py --out DIR [--smollm2 PATH] [--only NAME ...]
"""
import argparse
import os

import numpy as np
import gguf

N_LAYER = 3
N_EMBD = 128
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 32
N_FF = 256
CTX = 2048


def tokenizer_fields(path):
    r = gguf.GGUFReader(path)
    out = {}
    for k, f in r.fields.items():
        if k.startswith("tokenizer."):
            out[k] = f
    return out


def write_file(w, path):
    """Writes a GGUFWriter's header, metadata and tensors, and closes it."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {path}")


def copy_tokenizer(w, fields):
    for k, f in fields.items():
        if k == "tokenizer.chat_template":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            sub = f.types[1]
            vals = f.contents()
            if sub == gguf.GGUFValueType.STRING:
                w.add_array(k, vals)
            else:
                w.add_array(k, vals)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_string(k, f.contents())
        elif vt == gguf.GGUFValueType.BOOL:
            w.add_bool(k, bool(f.contents()))
        elif vt == gguf.GGUFValueType.UINT32:
            w.add_uint32(k, int(f.contents()))
        elif vt == gguf.GGUFValueType.INT32:
            w.add_int32(k, int(f.contents()))
        elif vt == gguf.GGUFValueType.FLOAT32:
            w.add_float32(k, float(f.contents()))
        else:
            raise ValueError(f"{k}: unexpected type {vt}")


def make(arch, out_dir, tok, n_vocab, seed):
    rng = np.random.default_rng(seed)
    path = os.path.join(out_dir, f"tiny-{arch}.gguf")
    w = gguf.GGUFWriter(path, arch)
    # Not "phi3" in the name: llama.cpp then applies Phi-3's token fix-ups,
    # which need Phi-3's own vocabulary.
    w.add_name(f"tiny random {arch}" if arch != "phi3" else "tiny random Phi 3 layout")
    w.add_block_count(N_LAYER)
    w.add_context_length(CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0 if arch != "qwen3" else 1000000.0)
    w.add_file_type(1)
    if arch == "qwen3":
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if arch == "gemma2":
        w.add_sliding_window(8)
        w.add_float32("gemma2.attn_logit_softcapping", 50.0)
        w.add_float32("gemma2.final_logit_softcapping", 30.0)
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if arch == "phi3":
        w.add_rope_dimension_count(HEAD_DIM)
    copy_tokenizer(w, tok)

    def mat(name, n_out, n_in, scale=1.0, qtype=None):
        a = (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)
        if qtype == "Q8_0" and n_in % 32 == 0:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, a.astype(np.float16))

    def vec(name, n, center=1.0, spread=0.1):
        w.add_tensor(name, (center + spread * rng.standard_normal(n)).astype(np.float32))

    q_rows = N_HEAD * HEAD_DIM
    kv_rows = N_HEAD_KV * HEAD_DIM
    emb = (rng.standard_normal((n_vocab, N_EMBD))).astype(np.float32)
    if arch in ("gemma2",):
        emb /= np.sqrt(N_EMBD)  # the model multiplies by sqrt(n_embd)
    w.add_tensor("token_embd.weight",
                 gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    vec("output_norm.weight", N_EMBD)
    if arch in ("qwen2", "phi3"):
        mat("output.weight", n_vocab, N_EMBD, scale=4.0, qtype="Q8_0")
    for il in range(N_LAYER):
        p = f"blk.{il}."
        qt = "Q8_0" if il % 2 == 0 else None
        vec(p + "attn_norm.weight", N_EMBD)
        if arch == "phi3":
            mat(p + "attn_qkv.weight", q_rows + 2 * kv_rows, N_EMBD, 2.0, qt)
        else:
            mat(p + "attn_q.weight", q_rows, N_EMBD, 2.0, qt)
            mat(p + "attn_k.weight", kv_rows, N_EMBD, 2.0, qt)
            mat(p + "attn_v.weight", kv_rows, N_EMBD, 1.0, qt)
        if arch == "qwen2":
            vec(p + "attn_q.bias", q_rows, 0.0, 0.5)
            vec(p + "attn_k.bias", kv_rows, 0.0, 0.5)
            vec(p + "attn_v.bias", kv_rows, 0.0, 0.5)
        if arch == "qwen3":
            vec(p + "attn_q_norm.weight", HEAD_DIM)
            vec(p + "attn_k_norm.weight", HEAD_DIM)
        mat(p + "attn_output.weight", N_EMBD, q_rows, 1.0, qt)
        if arch == "gemma2":
            vec(p + "post_attention_norm.weight", N_EMBD)
        vec(p + "ffn_norm.weight", N_EMBD)
        if arch == "phi3":
            mat(p + "ffn_up.weight", 2 * N_FF, N_EMBD, 2.0, qt)
        else:
            mat(p + "ffn_gate.weight", N_FF, N_EMBD, 2.0, qt)
            mat(p + "ffn_up.weight", N_FF, N_EMBD, 2.0, qt)
        mat(p + "ffn_down.weight", N_EMBD, N_FF, 1.0, qt)
        if arch == "gemma2":
            vec(p + "post_ffw_norm.weight", N_EMBD)
    write_file(w, path)


N_EXPERT = 8
N_EXPERT_USED = 2
# name: (general.architecture, n_ff, expert width, shared expert width, seed)
MOE_MODELS = {
    "mixtral": ("llama", 128, 128, 0, 2000),
    "qwen2moe": ("qwen2moe", 256, 64, 128, 2001),
    "qwen3moe": ("qwen3moe", 256, 96, 0, 2002),
    "olmoe": ("olmoe", 128, 128, 0, 2003),
}


def check_routing(name, emb, norm, routers, bias=None):
    """Fails unless the first block's router, on the normed embeddings of
    the vocabulary, picks every expert for some tokens and no expert for
    most of them (a router that sends everything to one pair would leave
    the other experts' paths untested). bias: the router's (gpt-oss)."""
    x = emb / np.sqrt(np.mean(emb * emb, axis=1, keepdims=True) + 1e-6) * norm
    logits = x @ routers[0].T
    if bias is not None:
        logits = logits + bias
    top = np.argsort(-logits, axis=1)[:, :N_EXPERT_USED]
    share = np.bincount(top.ravel(), minlength=N_EXPERT) / top.size
    if share.min() < 0.02 or share.max() > 0.5:
        raise SystemExit(f"{name}: degenerate routing, expert shares {share}")
    print(f"{name}: layer 0 expert shares {np.round(share, 3).tolist()}")


def make_moe(name, out_dir, tok, n_vocab):
    arch, n_ff, n_ff_exp, n_ff_shexp, seed = MOE_MODELS[name]
    rng = np.random.default_rng(seed)
    n_head_kv = N_HEAD if arch == "olmoe" else N_HEAD_KV
    path = os.path.join(out_dir, f"tiny-{name}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"tiny random {name}")
    w.add_block_count(N_LAYER)
    w.add_context_length(CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0 if arch.startswith("qwen") else 10000.0)
    w.add_file_type(1)
    w.add_expert_count(N_EXPERT)
    w.add_expert_used_count(N_EXPERT_USED)
    if arch in ("qwen2moe", "qwen3moe"):
        w.add_expert_feed_forward_length(n_ff_exp)
    if arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(n_ff_shexp)
    if arch == "qwen3moe":
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    copy_tokenizer(w, tok)

    def quantized(name_, a, qtype):
        if qtype == "Q8_0" and a.shape[-1] % 32 == 0:
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name_, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name_, a.astype(np.float16))

    def mat(name_, n_out, n_in, scale=1.0, qtype=None):
        a = (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)
        quantized(name_, a, qtype)

    def experts(name_, n_out, n_in, scale, qtype):
        a = (rng.standard_normal((N_EXPERT, n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)
        quantized(name_, a, qtype)

    def vec(name_, n, center=1.0, spread=0.1):
        v = (center + spread * rng.standard_normal(n)).astype(np.float32)
        w.add_tensor(name_, v)
        return v

    q_rows = N_HEAD * HEAD_DIM
    kv_rows = n_head_kv * HEAD_DIM
    emb = rng.standard_normal((n_vocab, N_EMBD)).astype(np.float32)
    w.add_tensor("token_embd.weight",
                 gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    vec("output_norm.weight", N_EMBD)
    if arch in ("qwen2moe", "olmoe", "llama"):
        mat("output.weight", n_vocab, N_EMBD, scale=4.0, qtype="Q8_0")
    routers = []
    norms = []
    for il in range(N_LAYER):
        p = f"blk.{il}."
        qt = "Q8_0" if il % 2 == 0 else None
        vec(p + "attn_norm.weight", N_EMBD)
        mat(p + "attn_q.weight", q_rows, N_EMBD, 2.0, qt)
        mat(p + "attn_k.weight", kv_rows, N_EMBD, 2.0, qt)
        mat(p + "attn_v.weight", kv_rows, N_EMBD, 1.0, qt)
        if arch == "qwen2moe":
            vec(p + "attn_q.bias", q_rows, 0.0, 0.5)
            vec(p + "attn_k.bias", kv_rows, 0.0, 0.5)
            vec(p + "attn_v.bias", kv_rows, 0.0, 0.5)
        if arch == "qwen3moe":
            vec(p + "attn_q_norm.weight", HEAD_DIM)
            vec(p + "attn_k_norm.weight", HEAD_DIM)
        if arch == "olmoe":
            vec(p + "attn_q_norm.weight", q_rows)
            vec(p + "attn_k_norm.weight", kv_rows)
        mat(p + "attn_output.weight", N_EMBD, q_rows, 1.0, qt)
        norms.append(vec(p + "ffn_norm.weight", N_EMBD))
        router = (rng.standard_normal((N_EXPERT, N_EMBD)) * 2.0 / np.sqrt(N_EMBD)).astype(np.float32)
        routers.append(router)
        w.add_tensor(p + "ffn_gate_inp.weight", router)
        # Types: layer 0 all Q8_0, layer 1 all F16, layer 2 gate/up Q8_0
        # and down F16.
        up_t = "Q8_0" if il in (0, 2) else None
        down_t = "Q8_0" if il == 0 else None
        experts(p + "ffn_gate_exps.weight", n_ff_exp, N_EMBD, 2.0, up_t)
        experts(p + "ffn_up_exps.weight", n_ff_exp, N_EMBD, 2.0, up_t)
        experts(p + "ffn_down_exps.weight", N_EMBD, n_ff_exp, 1.0, down_t)
        if n_ff_shexp:
            w.add_tensor(p + "ffn_gate_inp_shexp.weight",
                         (rng.standard_normal(N_EMBD) * 2.0 / np.sqrt(N_EMBD)).astype(np.float32))
            mat(p + "ffn_gate_shexp.weight", n_ff_shexp, N_EMBD, 2.0, qt)
            mat(p + "ffn_up_shexp.weight", n_ff_shexp, N_EMBD, 2.0, qt)
            mat(p + "ffn_down_shexp.weight", N_EMBD, n_ff_shexp, 1.0, qt)
    check_routing(name, emb, norms[0], routers)
    write_file(w, path)


def make_gpt_oss(out_dir, tok, n_vocab, seed):
    """gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE; tensors as
    src/models/openai-moe.cpp loads them)."""
    arch = "gpt-oss"
    n_layer, n_embd, n_head, n_head_kv, head_dim = 4, 128, 8, 2, 32
    n_ff_exp, n_expert, n_expert_used = 96, 8, 2
    rng = np.random.default_rng(seed)
    path = os.path.join(out_dir, f"tiny-{arch}.gguf")
    w = gguf.GGUFWriter(path, arch)
    w.add_name("tiny random gpt-oss")
    w.add_block_count(n_layer)
    w.add_context_length(CTX)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff_exp)
    w.add_expert_feed_forward_length(n_ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(64)
    w.add_sliding_window(8)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_expert_used)
    w.add_file_type(1)
    copy_tokenizer(w, tok)

    def mat(name, n_out, n_in, scale=1.0, qtype=None):
        a = (rng.standard_normal((n_out, n_in)) * scale / np.sqrt(n_in)).astype(np.float32)
        if qtype == "Q8_0":
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        elif qtype == "F32":
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, a.astype(np.float16))
        return a

    def experts(name, n_out, n_in, scale):
        # [n_expert][n_out][n_in] in numpy = ne [n_in, n_out, n_expert].
        a = (rng.standard_normal((n_expert, n_out, n_in)) * scale / np.sqrt(n_in)
             ).astype(np.float32)
        q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.MXFP4)
        w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.MXFP4)

    def vec(name, shape, center=0.0, spread=0.1):
        v = (center + spread * rng.standard_normal(shape)).astype(np.float32)
        w.add_tensor(name, v)
        return v

    q_rows = n_head * head_dim
    kv_rows = n_head_kv * head_dim
    emb = rng.standard_normal((n_vocab, n_embd)).astype(np.float32)
    w.add_tensor("token_embd.weight",
                 gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    vec("output_norm.weight", n_embd, 1.0)
    # Logits of spread ~8: top-2 gaps mostly well above the agreement
    # test's tie margin of 0.5.
    mat("output.weight", n_vocab, n_embd, scale=8.0, qtype="Q8_0")
    for il in range(n_layer):
        p = f"blk.{il}."
        qt = "Q8_0" if il % 2 == 0 else None
        vec(p + "attn_norm.weight", n_embd, 1.0)
        mat(p + "attn_q.weight", q_rows, n_embd, 2.0, qt)
        mat(p + "attn_k.weight", kv_rows, n_embd, 2.0, qt)
        mat(p + "attn_v.weight", kv_rows, n_embd, 1.0, qt)
        vec(p + "attn_q.bias", q_rows, 0.0, 0.5)
        vec(p + "attn_k.bias", kv_rows, 0.0, 0.5)
        vec(p + "attn_v.bias", kv_rows, 0.0, 0.5)
        mat(p + "attn_output.weight", n_embd, q_rows, 1.0, qt)
        vec(p + "attn_output.bias", n_embd, 0.0, 0.2)
        # Sink logits of the scores' size: some heads' sinks take much of
        # the weight, others little.
        vec(p + "attn_sinks.weight", n_head, 0.0, 1.5)
        norm = vec(p + "post_attention_norm.weight", n_embd, 1.0)
        router = mat(p + "ffn_gate_inp.weight", n_expert, n_embd, 3.0, "F32")
        router_bias = vec(p + "ffn_gate_inp.bias", n_expert, 0.0, 0.5)
        if il == 0:
            check_routing(arch, emb, norm, [router], router_bias)
        # gate/up outputs of spread ~4 so that the clamp at 7 bites.
        experts(p + "ffn_gate_exps.weight", n_ff_exp, n_embd, 4.0)
        experts(p + "ffn_up_exps.weight", n_ff_exp, n_embd, 4.0)
        experts(p + "ffn_down_exps.weight", n_embd, n_ff_exp, 0.5)
        vec(p + "ffn_gate_exps.bias", (n_expert, n_ff_exp), 0.0, 0.5)
        vec(p + "ffn_up_exps.bias", (n_expert, n_ff_exp), 0.0, 0.5)
        vec(p + "ffn_down_exps.bias", (n_expert, n_embd), 0.0, 0.2)
    write_file(w, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--smollm2", default=os.path.expanduser(
        "~/.cache/strata/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--only", nargs="*", help="only these models (e.g. qwen2 mixtral)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tok = tokenizer_fields(args.smollm2)
    n_vocab = len(tok["tokenizer.ggml.tokens"].data)
    for i, arch in enumerate(["qwen2", "qwen3", "gemma2", "phi3"]):
        if not args.only or arch in args.only:
            make(arch, args.out, tok, n_vocab, seed=1000 + i)
    # Each with its own seed, after the dense ones (which stay as they were).
    for name in MOE_MODELS:
        if not args.only or name in args.only:
            make_moe(name, args.out, tok, n_vocab)
    # Last, so that the files above keep their bytes.
    if not args.only or "gpt-oss" in args.only:
        make_gpt_oss(args.out, tok, n_vocab, seed=3030)


if __name__ == "__main__":
    main()
