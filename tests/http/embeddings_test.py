#!/usr/bin/env python3
"""Embeddings end to end against llama.cpp: HTTP POST /v1/embeddings (and
/embeddings), the official openai SDK's client.embeddings.create and gRPC
Inference.Embed, through `strata serve` (--setup serve) or a
strata-coordinator with 2 strata-worker processes (--setup cluster), with
SmolLM2 and, when it is beside it, gemma-3-270m.

The reference is llama.cpp's embedding mode (llama-cpp-python, embedding=True
with pooling_type MEAN or LAST): the hidden state after the model's output
norm (src/models/llama.cpp and gemma3.cpp name it "result_norm" and set
res->t_embd to it), pooled by src/llama-graph.cpp build_pooling (MEAN: a
matrix product with build_inp_mean's 1/n column; LAST: ggml_get_rows of the
row llm_graph_input_cls::set_input picks, the highest position), read with
llama_get_embeddings_seq, before any normalization (the server's
common_embd_normalize runs after). llama.cpp pools one ubatch at a time
(llama-context.cpp decode overwrites embd_seq per ubatch), so the reference
holds every input in one ubatch (n_batch = n_ubatch = its context). Text is
tokenized as llama-server does for embeddings (tokenize_input_subprompt with
add_special and parse_special: BOS/EOS as the vocabulary says, special-token
text read as the special token); the reference embeds exactly the ids strata
used (checked against /tokenize and the per-input prompt_tokens).

Checked, for both poolings and normalize true and false: every vector
against llama.cpp's, within bounds set from llama.cpp's own spread (flash
attention on or an f32 KV cache move its vectors by a few percent; strata's
CPU kernels round activations their own way, so the two agree to about a
percent, not bit for bit; the spread is printed), including an input longer
than the prefill chunk (512: mean pooling sums two chunks); mean pooling
across the chunk boundary exactly, without llama.cpp (in a causal model n *
mean(first n) - j * mean(first j) is the sum of the last rows of the
prefixes between); the normalized vector has unit norm and is the raw one
over its norm; a batch of N inputs gives bit for bit the vectors of N single
requests, sent one after another and at once; base64 is the little-endian
f32 bytes of the float answer; the same text and its ids give the same
vector; gRPC Embed gives HTTP's vectors; the default pooling is the GGUF's
(neither model names one: last); usage; the openai SDK (which asks for
base64 by default and decodes it); dimensions, user and cache_salt (another
salt is never served from the first's cache); the refusals (400 OpenAI
error objects; gRPC INVALID_ARGUMENT and OUT_OF_RANGE).

Exit status: 0 passed, 1 failed, 77 skipped (model, SDK, grpcio, numpy or
llama_cpp absent).
"""
import base64
import concurrent.futures
import copy
import gc
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_test import Failures, load_stubs, skip  # noqa: E402
import http_test  # noqa: E402
from http_test import error_of, parse_args_or_skip, raw, run_setup  # noqa: E402

CTX = http_test.CTX      # strata's context (1024): the longest input
REF_CTX = 768            # llama.cpp's context, batch and ubatch: each input in one ubatch
PREFILL_CHUNK = 512      # strata serve's --prefill-chunk and the cluster's prefill_chunk default
MAX_INPUTS = 2048        # OpenAI's bound on the inputs of one request
GEMMA = "gemma-3-270m-q4_k_m.gguf"  # tried beside --model (scripts/fetch-models.sh)

# Bounds against llama.cpp, per architecture: the worst cosine similarity
# and relative L2 error over every input, pooling and normalization, and the
# relative L2 error of the long input's mean (several chunks, many rows: the
# rounding averages out). Set from llama.cpp's own spread, rounded up:
# llama.cpp against itself with flash attention on, or an f32 KV cache,
# moves these vectors by up to 4.8e-2 relative (1 - cos 1.2e-3) on SmolLM2
# and 6.9e-2 (1 - cos 2.1e-3) on gemma-3-270m, the long input's mean by
# 7.5e-3 and 1.0e-2 (and its Q4_1 result is 1.2e-2 .. 3.7e-2 from a float64
# forward of the same dequantized weights, from its q8_1 activations alone).
# strata (CPU, serve and cluster alike) measured: SmolLM2 worst 3.5e-2
# (1 - cos 6.1e-4), long mean 5.1e-3; gemma worst 6.35e-2 (1 - cos 2.0e-3),
# long mean 8.6e-3.
BOUNDS = {  # arch: (min cosine, max relative L2 error, max for the long input's mean)
    "llama": (0.9985, 0.05, 0.012),
    "gemma3": (0.997, 0.08, 0.015),
}

# Special-token text: the model's chat markers, which llama-server's
# tokenization (parse_special) reads as one token each.
SPECIAL_TEXT = {
    "llama": "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n",
    "gemma3": "<start_of_turn>user\nWhat is the boiling point of water?<end_of_turn>\n",
}


def long_text():
    """Past the prefill chunk, within REF_CTX: 636 tokens (SmolLM2), 603 (gemma)."""
    return "".join(f"Line {i}: the crate holds {i * 7 % 97} apples and {i % 13} pears.\n"
                   for i in range(34))


def texts_for(arch):
    return ["Hello",
            "The capital of France is Paris.",
            SPECIAL_TEXT.get(arch, SPECIAL_TEXT["llama"]),
            "Ünïcödé — naïve café, 東京タワー, emoji 🚀, tabs\tand\nnewlines   spaced.",
            long_text()]


class Reference:
    """llama.cpp's embeddings of token ids: the raw (unnormalized) pooled
    result_norm, MEAN or LAST, each input alone in one ubatch, with
    llama-cpp-python's defaults otherwise (flash attention off, f16 KV). (Ids, not
    Llama.embed(text): that tokenizes with special=False, so it would read
    "<|im_start|>" as text where llama-server reads the special token.)"""

    def __init__(self, model, n_ctx):
        import llama_cpp
        self.lc = llama_cpp
        threads = os.cpu_count() or 1
        self.llms = {
            name: llama_cpp.Llama(model_path=model, embedding=True, pooling_type=pooling,
                                  n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_seq_max=1,
                                  n_threads=threads, n_threads_batch=threads, verbose=False)
            for name, pooling in (("mean", llama_cpp.LLAMA_POOLING_TYPE_MEAN),
                                  ("last", llama_cpp.LLAMA_POOLING_TYPE_LAST))}
        llm = self.llms["mean"]
        self.n_ctx = n_ctx
        self.n_embd = llm.n_embd()
        self.n_vocab = llm.n_vocab()
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self.add_bos = llama_cpp.llama_vocab_get_add_bos(vocab)
        self.add_eos = llama_cpp.llama_vocab_get_add_eos(vocab)
        self.cache = {}
        self.seconds = 0.0

    def tokenize(self, text, special=True):
        """llama-server's embedding tokenization: add_special (llama-cpp-python
        calls it add_bos) and parse_special."""
        return self.llms["mean"].tokenize(text.encode(), add_bos=True, special=special)

    def embed(self, ids, pooling):
        """The pooled vector (float32) llama.cpp computes for ids."""
        import numpy as np
        key = (tuple(ids), pooling)
        if key in self.cache:
            return self.cache[key]
        if not 0 < len(ids) <= self.n_ctx:
            raise ValueError(f"{len(ids)} ids for a reference context of {self.n_ctx}")
        lc, llm = self.lc, self.llms[pooling]
        t = time.time()
        lc.llama_memory_clear(lc.llama_get_memory(llm.ctx), True)
        batch = lc.llama_batch_init(len(ids), 0, 1)
        try:
            for i, tok in enumerate(ids):
                batch.token[i] = tok
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = True  # embeddings need every row
            batch.n_tokens = len(ids)
            rc = lc.llama_decode(llm.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode: {rc}")
            ptr = lc.llama_get_embeddings_seq(llm.ctx, 0)
            out = np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).astype(np.float32)
        finally:
            lc.llama_batch_free(batch)
        self.seconds += time.time() - t
        self.cache[key] = out
        return out

    def close(self):
        self.llms.clear()
        self.cache.clear()
        gc.collect()


def gguf_arch_and_pooling(model):
    """general.architecture and the {arch}.pooling_type that strata's
    default follows (mean 1 or last 3; else last)."""
    import gguf
    r = gguf.GGUFReader(model)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    field = r.fields.get(f"{arch}.pooling_type")
    pooling = int(field.parts[-1][0]) if field is not None else None
    return arch, {1: "mean", 3: "last"}.get(pooling, "last"), pooling


def vectors(resp):
    """The response's vectors as float32 arrays (base64: little-endian f32)."""
    import numpy as np
    out = []
    for d in resp["data"]:
        e = d["embedding"]
        if isinstance(e, str):
            out.append(np.frombuffer(base64.b64decode(e), dtype="<f4").astype(np.float32))
        else:
            out.append(np.array(e, dtype=np.float64).astype(np.float32))
    return out


def same(a, b):
    """Bit for bit (lists of float32 arrays)."""
    import numpy as np
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and
                                    np.array_equal(x.view(np.uint32), y.view(np.uint32))
                                    for x, y in zip(a, b))


def max_diff(a, b):
    import numpy as np
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    return max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in zip(a, b))


def closeness(got, want):
    """(cosine, relative L2 error) of got against want, in float64."""
    import numpy as np
    g, w = got.astype(np.float64), want.astype(np.float64)
    cos = float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w)))
    return cos, float(np.linalg.norm(g - w) / np.linalg.norm(w))


def embed(host, body, path="/v1/embeddings"):
    """(status, parsed body) of one request."""
    st, _, out = raw(host, "POST", path, body=body, timeout=900)
    try:
        return st, json.loads(out)
    except ValueError:
        return st, {"raw": out[:300]}


def check_embeddings(args, f, ref, host, grpc_address, stubs, label, full):
    import numpy as np
    pb, pb_grpc, grpc = stubs
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(grpc_address))
    arch, default_pooling, gguf_pooling = gguf_arch_and_pooling(args.model)
    cos_min, rel_max, long_mean_max = BOUNDS.get(arch, BOUNDS["llama"])
    name = os.path.basename(args.model)
    label = f"{label} {name}"
    st, _, out = raw(host, "GET", "/v1/models")
    model = json.loads(out)["data"][0]["id"]
    texts = texts_for(arch)

    # Tokenization: strata's ids (/tokenize: add_special and parse_special
    # by default, as for embeddings) are llama.cpp's.
    ids = []
    for text in texts:
        st, _, out = raw(host, "POST", "/tokenize", body={"content": text})
        got = json.loads(out)["tokens"]
        want = ref.tokenize(text)
        f.check(st == 200 and got == want,
                f"{label}: /tokenize {text[:24]!r}: {len(got)} ids, llama.cpp's "
                f"(add_special, parse_special){'' if got == want else f': {got[:12]} vs {want[:12]}'}")
        ids.append(got)
    special = texts[2]
    f.check(len(ref.tokenize(special)) < len(ref.tokenize(special, special=False)),
            f"{label}: the chat markers are special tokens ({len(ref.tokenize(special))} ids; "
            f"{len(ref.tokenize(special, special=False))} read as text)")
    f.check(PREFILL_CHUNK < len(ids[-1]) < CTX,
            f"{label}: the long input ({len(ids[-1])} tokens) spans two prefill chunks of "
            f"{PREFILL_CHUNK}")
    n_total = sum(len(x) for x in ids)

    # Against llama.cpp: both poolings, raw and normalized, all inputs in
    # one request (base64, the exact floats).
    answers = {}
    rows = []
    worst_cos, worst_rel = 1.0, 0.0
    for pooling in ("mean", "last"):
        for normalize in (False, True):
            st, r = embed(host, {"model": model, "input": texts, "pooling": pooling,
                                 "normalize": normalize, "encoding_format": "base64"})
            if st != 200:
                f.check(False, f"{label}: {pooling} normalize {normalize}: {st} {r}")
                continue
            got = vectors(r)
            answers[pooling, normalize] = got
            usage = r.get("usage", {})
            f.check(r.get("object") == "list" and r.get("model") == model and
                    [d.get("object") for d in r["data"]] == ["embedding"] * len(texts) and
                    [d.get("index") for d in r["data"]] == list(range(len(texts))) and
                    all(v.shape == (ref.n_embd,) for v in got) and
                    usage.get("prompt_tokens") == n_total and usage.get("total_tokens") == n_total,
                    f"{label}: {pooling} normalize {normalize}: {len(got)} vectors of "
                    f"{ref.n_embd}, indexes in order, usage {usage} ({n_total} tokens)")
            for i, (v, x) in enumerate(zip(got, ids)):
                want = ref.embed(x, pooling)
                if normalize:
                    want = want / np.float32(np.linalg.norm(want.astype(np.float64)))
                cos, rel = closeness(v, want)
                rows.append((pooling, normalize, i, len(x), cos, rel))
                worst_cos, worst_rel = min(worst_cos, cos), max(worst_rel, rel)
    print(f"{label}: strata against llama.cpp (reference decodes {ref.seconds:.1f} s):")
    print("  pooling normalize input tokens   cosine        1-cos       rel L2")
    for pooling, normalize, i, n, cos, rel in rows:
        print(f"  {pooling:7s} {str(normalize):9s} {i:5d} {n:6d}   {cos:.8f}  {1 - cos:.3e}  {rel:.3e}")
    f.check(len(rows) == 4 * len(texts) and worst_cos >= cos_min and worst_rel <= rel_max,
            f"{label}: every vector within bounds of llama.cpp's (worst cosine {worst_cos:.6f} "
            f">= {cos_min}, worst relative L2 {worst_rel:.3e} <= {rel_max}; {len(rows)} compared)")
    long_mean = max([rel for pooling, _, i, _, _, rel in rows
                     if pooling == "mean" and i == len(texts) - 1] or [float("inf")])
    f.check(long_mean <= long_mean_max,
            f"{label}: the long input's mean ({len(ids[-1])} tokens, two chunks) within "
            f"{long_mean:.3e} <= {long_mean_max} of llama.cpp's")
    if len(answers) < 4:
        return

    # Normalization: unit norm, the raw vector over its norm.
    for pooling in ("mean", "last"):
        raw_v, unit = answers[pooling, False], answers[pooling, True]
        norms = [float(np.linalg.norm(u.astype(np.float64))) for u in unit]
        scaled = [r.astype(np.float64) / np.linalg.norm(r.astype(np.float64)) for r in raw_v]
        err = max(float(np.abs(u - s).max()) for u, s in zip(unit, scaled))
        f.check(all(abs(n - 1) <= 1e-5 for n in norms) and err <= 1e-6 and
                all(abs(float(np.linalg.norm(r.astype(np.float64))) - 1) > 1e-3 for r in raw_v),
                f"{label}: {pooling}: normalized vectors have norm 1 (within "
                f"{max(abs(n - 1) for n in norms):.1e}) and are the raw ones over their norm "
                f"(within {err:.1e}); raw norms {[round(float(np.linalg.norm(r)), 2) for r in raw_v]}")
    # Mean pooling across a chunk boundary, exactly, without llama.cpp: in a
    # causal model row k of a prompt is the last row of its first k+1 ids,
    # so n * mean(ids[:n]) - j * mean(ids[:j]) == sum of last(ids[:k]) for
    # k in (j, n]; with j < PREFILL_CHUNK < n the two means are cut into
    # chunks differently (a mean of the last chunk only, a sum over chunks
    # divided by the wrong count, a row counted twice all break it).
    long_ids = ids[-1]
    n, j = PREFILL_CHUNK + 4, PREFILL_CHUNK - 2
    st, rm = embed(host, {"model": model, "input": [long_ids[:n], long_ids[:j]], "pooling": "mean",
                          "normalize": False, "encoding_format": "base64"})
    st2, rl = embed(host, {"model": model, "input": [long_ids[:k] for k in range(j + 1, n + 1)],
                           "pooling": "last", "normalize": False, "encoding_format": "base64"})
    if st == st2 == 200:
        m_n, m_j = (v.astype(np.float64) for v in vectors(rm))
        lhs = n * m_n - j * m_j
        rhs = np.sum([v.astype(np.float64) for v in vectors(rl)], axis=0)
        err = float(np.linalg.norm(lhs - rhs) / np.linalg.norm(rhs))
        f.check(err <= 1e-3,
                f"{label}: {n} * mean(first {n}) - {j} * mean(first {j}) == the last rows of "
                f"the {n - j} prefixes between (relative error {err:.2e} <= 1e-3; chunks of "
                f"{PREFILL_CHUNK})")
    else:
        f.check(False, f"{label}: mean across a chunk boundary: {st} {rm}, {st2} {rl}")
    # One token: its mean is its last row.
    st, r1 = embed(host, {"model": model, "input": [[ids[1][0]]], "pooling": "mean",
                          "encoding_format": "base64"})
    st2, r2 = embed(host, {"model": model, "input": [[ids[1][0]]], "pooling": "last",
                           "encoding_format": "base64"})
    f.check(st == st2 == 200 and same(vectors(r1), vectors(r2)),
            f"{label}: one token: mean pooling == last pooling, bit for bit")

    # Default pooling: the GGUF's pooling_type when mean or last, else last.
    st, r = embed(host, {"model": model, "input": texts, "encoding_format": "base64"})
    f.check(st == 200 and same(vectors(r), answers[default_pooling, True]),
            f"{label}: no pooling, no normalize: {default_pooling} (the GGUF's pooling_type "
            f"{gguf_pooling}), normalized, bit for bit")

    # A batch == its inputs one by one, bit for bit (strata's batch
    # invariance; last pooling repeats a prompt, so the prefix cache may
    # serve it), sent one after another and all at once.
    for pooling, at_once in (("mean", False), ("last", True)):
        def single(text, pooling=pooling):
            st, r = embed(host, {"model": model, "input": text, "pooling": pooling,
                                 "normalize": False, "encoding_format": "base64"})
            return st, r
        if at_once:
            with concurrent.futures.ThreadPoolExecutor(len(texts)) as ex:
                results = list(ex.map(single, texts))
        else:
            results = [single(t) for t in texts]
        singles = [vectors(r)[0] if st == 200 else None for st, r in results]
        ok = all(s is not None for s in singles)
        batch = answers[pooling, False]
        f.check(ok and same(singles, batch) and
                [r["usage"]["prompt_tokens"] for _, r in results] == [len(x) for x in ids],
                f"{label}: {pooling}: {len(texts)} single requests "
                f"({'at once' if at_once else 'one by one'}) == the batch, bit for bit"
                f"{'' if not ok or same(singles, batch) else f' (max diff {max_diff(singles, batch):.3e})'}")

    # The same ids as token arrays ([[int]]) and one as [int]; /embeddings.
    st, r = embed(host, {"model": model, "input": ids, "pooling": "mean", "normalize": False,
                         "encoding_format": "base64"})
    f.check(st == 200 and same(vectors(r), answers["mean", False]) and
            r["usage"]["prompt_tokens"] == n_total,
            f"{label}: token arrays == their text, bit for bit")
    st, r = embed(host, {"model": model, "input": ids[1], "pooling": "last", "normalize": False,
                         "encoding_format": "base64"}, path="/embeddings")
    f.check(st == 200 and len(r["data"]) == 1 and
            same(vectors(r), [answers["last", False][1]]) and
            r["usage"]["prompt_tokens"] == len(ids[1]),
            f"{label}: one token array ([int]) on /embeddings == its text")

    # base64 == float: the JSON floats are the same float32 values.
    st, r = embed(host, {"model": model, "input": texts, "pooling": "mean", "normalize": False,
                         "encoding_format": "float"})
    f.check(st == 200 and all(isinstance(d["embedding"], list) for d in r["data"]) and
            same(vectors(r), answers["mean", False]),
            f"{label}: encoding_format float == base64 decoded (little-endian f32), exactly")
    st, r = embed(host, {"model": model, "input": texts[1], "pooling": "mean",
                         "normalize": False})
    f.check(st == 200 and isinstance(r["data"][0]["embedding"], list) and
            same(vectors(r), [answers["mean", False][1]]),
            f"{label}: encoding_format's default is float")

    # gRPC Embed: HTTP's vectors, the pooling used, per-input token counts.
    def grpc_embed(inputs, pooling, normalize=None, salt=""):
        req = pb.EmbedRequest(model=model, pooling=pooling, cache_salt=salt)
        for x in inputs:
            if isinstance(x, str):
                req.inputs.add(text=x)
            else:
                req.inputs.add().ids.ids.extend(x)
        if normalize is not None:
            req.normalize = normalize
        return stub.Embed(req, timeout=900)

    for pooling, enum in (("mean", pb.POOLING_MEAN), ("last", pb.POOLING_LAST)):
        for normalize in (False, None):
            g = grpc_embed(texts, enum, normalize)
            got = [np.array(e.values, dtype=np.float32) for e in g.embeddings]
            want = answers[pooling, normalize is None]
            f.check(same(got, want) and g.pooling == pooling and
                    [e.prompt_tokens for e in g.embeddings] == [len(x) for x in ids] and
                    g.usage.prompt_tokens == n_total,
                    f"{label}: gRPC Embed {pooling} normalize "
                    f"{'unset (true)' if normalize is None else normalize} == HTTP, bit for bit; "
                    f"prompt_tokens {[e.prompt_tokens for e in g.embeddings]}")
    g = grpc_embed(ids[:2], pb.POOLING_DEFAULT, False)
    f.check(g.pooling == default_pooling and
            same([np.array(e.values, dtype=np.float32) for e in g.embeddings],
                 answers[default_pooling, False][:2]),
            f"{label}: gRPC token ids, POOLING_DEFAULT: {g.pooling!r}, HTTP's vectors")

    if not full:
        return

    # The openai SDK: asks for base64 (numpy is here) and decodes it.
    import httpx
    import openai
    sent = []

    def keep(request):
        try:
            sent.append(json.loads(request.content))
        except ValueError:
            sent.append(None)

    client = openai.OpenAI(base_url=f"http://{host}/v1", api_key="none", timeout=900,
                           http_client=httpx.Client(event_hooks={"request": [keep]}))
    e = client.embeddings.create(model=model, input=texts)
    got = [np.array(d.embedding, dtype=np.float32) for d in e.data]
    f.check(sent and sent[-1].get("encoding_format") == "base64" and
            same(got, answers[default_pooling, True]) and e.usage.prompt_tokens == n_total and
            [d.index for d in e.data] == list(range(len(texts))) and e.model == model,
            f"{label}: SDK embeddings.create (it sent encoding_format "
            f"{sent[-1].get('encoding_format') if sent else None!r}): the vectors, usage "
            f"{e.usage.prompt_tokens}")
    e = client.embeddings.create(model=model, input=ids[:3], encoding_format="float",
                                 dimensions=ref.n_embd, user="tenant-7")
    got = [np.array(d.embedding, dtype=np.float32) for d in e.data]
    f.check(same(got, answers[default_pooling, True][:3]),
            f"{label}: SDK with token arrays, encoding_format float, dimensions {ref.n_embd}, "
            f"user: the same vectors")
    e = client.embeddings.create(model=model, input=texts[1],
                                 extra_body={"pooling": "mean", "normalize": False})
    f.check(same([np.array(e.data[0].embedding, dtype=np.float32)], [answers["mean", False][1]]),
            f"{label}: SDK with one string and extra_body pooling mean, normalize false")
    try:
        client.embeddings.create(model=model, input="")
        f.check(False, f"{label}: SDK with an empty string: no error")
    except openai.BadRequestError as err:
        f.check(err.status_code == 400, f"{label}: SDK with an empty string: BadRequestError 400")

    # cache_salt: accepted, the same vectors; another salt never reads the
    # first's cache, the same salt does (last pooling restores cached
    # blocks): usage's cached tokens, HTTP and gRPC.
    salted = f"A salted embedding {label} {time.time_ns()}: " + "count the stars " * 12
    vecs, http_cached = [], []
    for salt in ("tenant-a", "tenant-b", "tenant-a"):
        st, r = embed(host, {"model": model, "input": salted, "pooling": "last",
                             "cache_salt": salt, "encoding_format": "base64"})
        vecs.append(vectors(r)[0] if st == 200 else None)
        http_cached.append(r.get("usage", {}).get("prompt_tokens_details", {})
                           .get("cached_tokens") if st == 200 else None)
    g = [grpc_embed([salted], pb.POOLING_LAST, salt=s) for s in ("tenant-c", "tenant-d", "tenant-c")]
    cached = [x.usage.cached_tokens for x in g]
    grpc_vecs = [np.array(x.embeddings[0].values, dtype=np.float32) for x in g]
    f.check(all(v is not None for v in vecs) and same(vecs, [vecs[0]] * 3) and
            same(grpc_vecs, [vecs[0]] * 3) and http_cached[:2] == [0, 0] and
            (http_cached[2] or 0) > 0 and cached[:2] == [0, 0] and cached[2] > 0,
            f"{label}: cache_salt accepted, the same vector under every salt; cached tokens "
            f"under a, b, a (HTTP): {http_cached}, under c, d, c (gRPC): {cached} "
            f"(only the salt's second request reads the cache)")

    # Refusals: 400 OpenAI error objects, naming the field.
    over_ids = [ids[1][-1]] * (CTX + 1)
    over_text = "word " * (CTX + 100)
    bad = [
        ({"model": model}, "input"),
        ({"model": model, "input": []}, "input"),
        ({"model": model, "input": ""}, "input"),
        ({"model": model, "input": ["fine", ""]}, "input"),
        ({"model": model, "input": [[]]}, "input"),
        ({"model": model, "input": 5}, "input"),
        ({"model": model, "input": None}, "input"),
        ({"model": model, "input": {"text": "a"}}, "input"),
        ({"model": model, "input": [1.5]}, "input"),
        ({"model": model, "input": ["a", 3]}, "input"),
        ({"model": model, "input": [[1, "a"]]}, "input"),
        ({"model": model, "input": [[1], 2]}, "input"),
        ({"model": model, "input": [ref.n_vocab]}, "input"),
        ({"model": model, "input": [[0], [-1]]}, "input"),
        ({"model": model, "input": over_ids}, "input"),
        ({"model": model, "input": over_text}, "input"),
        ({"model": model, "input": [[0]] * (MAX_INPUTS + 1)}, "input"),
        ({"model": model, "input": "a", "encoding_format": "hex"}, "encoding_format"),
        ({"model": model, "input": "a", "encoding_format": 1}, "encoding_format"),
        ({"model": model, "input": "a", "dimensions": ref.n_embd - 1}, "dimensions"),
        ({"model": model, "input": "a", "dimensions": 0}, "dimensions"),
        ({"model": model, "input": "a", "dimensions": str(ref.n_embd)}, "dimensions"),
        ({"model": model, "input": "a", "pooling": "cls"}, "pooling"),
        ({"model": model, "input": "a", "pooling": "none"}, "pooling"),
        ({"model": model, "input": "a", "pooling": 1}, "pooling"),
        ({"model": model, "input": "a", "normalize": "yes"}, "normalize"),
    ]
    for body, param in bad:
        st, err = error_of(raw(host, "POST", "/v1/embeddings", body=body, timeout=900))
        shown = json.dumps({k: v for k, v in body.items() if k != "model"})
        shown = shown if len(shown) < 80 else shown[:60] + f"... ({len(shown)} bytes)"
        named = param in (err.get("param") or "") + " " + err.get("message", "")
        f.check(st == 400 and err.get("type") == "invalid_request_error" and named,
                f"{label}: {shown} -> {st} naming {param} ({err.get('message', '')[:100]!r})")
    st, _, out = raw(host, "POST", "/v1/embeddings", body="{not json")
    f.check(st == 400, f"{label}: malformed JSON -> 400")
    st, _, _ = raw(host, "GET", "/v1/embeddings")
    f.check(st == 405, f"{label}: GET /v1/embeddings -> 405")
    # The longest input the context allows is served (two chunks, mean).
    st, r = embed(host, {"model": model, "input": (ids[-1] * (CTX // len(ids[-1]) + 1))[:CTX],
                         "pooling": "mean"})
    f.check(st == 200 and r["usage"]["prompt_tokens"] == CTX and
            np.isfinite(vectors(r)[0]).all() and
            abs(float(np.linalg.norm(vectors(r)[0].astype(np.float64))) - 1) <= 1e-5,
            f"{label}: an input of exactly the context ({CTX} tokens) -> 200")
    # gRPC refusals.
    for what, req, code in (
            ("no inputs", pb.EmbedRequest(model=model), grpc.StatusCode.INVALID_ARGUMENT),
            ("an empty text", pb.EmbedRequest(model=model, inputs=[pb.EmbedInput(text="")]),
             grpc.StatusCode.INVALID_ARGUMENT),
            ("an id out of the vocabulary",
             pb.EmbedRequest(model=model, inputs=[pb.EmbedInput(ids=pb.TokenIds(ids=[ref.n_vocab]))]),
             grpc.StatusCode.INVALID_ARGUMENT),
            (f"{CTX + 1} ids",
             pb.EmbedRequest(model=model, inputs=[pb.EmbedInput(ids=pb.TokenIds(ids=over_ids))]),
             grpc.StatusCode.OUT_OF_RANGE),
            (f"{MAX_INPUTS + 1} inputs",
             pb.EmbedRequest(model=model, inputs=[pb.EmbedInput(text="a")] * (MAX_INPUTS + 1)),
             grpc.StatusCode.INVALID_ARGUMENT)):
        try:
            stub.Embed(req, timeout=900)
            got = grpc.StatusCode.OK
        except grpc.RpcError as err:
            got = err.code()
        f.check(got == code, f"{label}: gRPC Embed with {what} -> {got.name} ({code.name})")
    # Still serving after the refusals.
    st, r = embed(host, {"model": model, "input": texts, "encoding_format": "base64"})
    f.check(st == 200 and same(vectors(r), answers[default_pooling, True]),
            f"{label}: after the refusals, the same vectors")


def main():
    args = parse_args_or_skip()
    try:
        import gguf  # noqa: F401
        import httpx  # noqa: F401
        import llama_cpp  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        skip(f"{e.name} is absent (scripts/install-test-tools.sh installs it)")
    models = [args.model]
    gemma = os.path.join(os.path.dirname(os.path.abspath(args.model)), GEMMA)
    if os.path.exists(gemma) and os.path.abspath(gemma) != os.path.abspath(args.model):
        models.append(gemma)
    else:
        print(f"note: {gemma} absent: SmolLM2 only (scripts/fetch-models.sh fetches it)")
    with tempfile.TemporaryDirectory(prefix="strata-embeddings-") as workdir:
        stubs = load_stubs(args.proto_dir, workdir)
        if not hasattr(stubs[0], "EmbedRequest"):
            skip("inference.proto has no Embed")
        f = Failures()
        status = 0
        for i, model in enumerate(models):
            margs = copy.copy(args)
            margs.model = model
            t = time.time()
            ref = Reference(model, REF_CTX)
            # llama.cpp's vectors for llama.cpp's ids, before strata starts
            # (the others, if strata's ids differ, when needed).
            arch, _, _ = gguf_arch_and_pooling(model)
            for text in texts_for(arch):
                for pooling in ("mean", "last"):
                    ref.embed(ref.tokenize(text), pooling)
            print(f"{os.path.basename(model)}: llama.cpp reference ready in {time.time() - t:.1f} s "
                  f"(n_embd {ref.n_embd}, n_vocab {ref.n_vocab}, add_bos {ref.add_bos}, "
                  f"add_eos {ref.add_eos})", flush=True)
            status = max(status, run_setup(
                margs, workdir, stubs, f,
                lambda procs, host, address, label:
                check_embeddings(margs, f, ref, host, address, stubs, label, full=i == 0)))
            ref.close()
        return 1 if f.n else status


if __name__ == "__main__":
    sys.exit(main())
