#!/usr/bin/env python3
"""Checks the tool_choice grammars with llama.cpp's own GBNF engine.

Usage: check_gbnf.py CASES.json MODEL.gguf
CASES.json: [{"name", "grammar", "accept": [text...], "reject": [text...]}],
written by tool_calls_test.cc. Each grammar must parse in llama.cpp
(llama-cpp-python's libllama), every "accept" text must be allowed token by
token (the model's vocabulary only tokenizes the text) and be complete at its
end, and every "reject" text must be refused somewhere. Exits 77 (skip) when
llama_cpp or the model is missing, 1 on a failure.
"""
import ctypes
import json
import os
import sys

try:
    import numpy as np
    from llama_cpp import llama_cpp as C
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

if len(sys.argv) != 3 or not os.path.exists(sys.argv[2]):
    print("skip: no model")
    sys.exit(77)

C.llama_backend_init()
params = C.llama_model_default_params()
params.vocab_only = True
model = C.llama_model_load_from_file(sys.argv[2].encode(), params)
vocab = C.llama_model_get_vocab(model)
eos = C.llama_vocab_eos(vocab)
dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def tokenize(text):
    b = text.encode()
    buf = (C.llama_token * (len(b) + 16))()
    n = C.llama_tokenize(vocab, b, len(b), buf, len(buf), False, True)
    return list(buf[:n])


def allowed(smpl, tok):
    """Whether the grammar lets `tok` come next (the sampler is offered only it)."""
    data = np.zeros(1, dtype=dtype)
    data["id"] = tok
    cur = C.llama_token_data_array(data.ctypes.data_as(ctypes.POINTER(C.llama_token_data)), 1, -1, False)
    C.llama_sampler_apply(smpl, ctypes.byref(cur))
    return cur.size == 1 and bool(np.isfinite(data["logit"][0]))


def run(grammar, text):
    smpl = C.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    if not smpl:
        return "does not parse"
    for tok in tokenize(text):
        if not allowed(smpl, tok):
            return f"refuses token {tok}"
        C.llama_sampler_accept(smpl, tok)
    return "ok" if allowed(smpl, eos) else "incomplete"


failures = 0
for case in json.load(open(sys.argv[1], encoding="utf-8")):
    for text in case["accept"]:
        r = run(case["grammar"], text)
        if r != "ok":
            failures += 1
            print(f"FAIL {case['name']}: {r}: {text!r}")
    for text in case["reject"]:
        if run(case["grammar"], text) == "ok":
            failures += 1
            print(f"FAIL {case['name']}: accepts {text!r}")
print(f"{failures} failures")
sys.exit(1 if failures else 0)
