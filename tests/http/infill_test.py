#!/usr/bin/env python3
"""Fill-in-the-middle end to end against llama.cpp: llama.cpp server's
/infill (and its /completion, the same answer for a plain prompt),
/v1/completions with `suffix` (the official openai SDK) and gRPC
GenerateRequest.infill, through `strata serve` (--setup serve) or a
strata-coordinator with 2 strata-worker processes (--setup cluster).

The model: SmolLM2 with FIM ids set in a copy's metadata (gguf's
gguf_new_metadata: fim_pre 8, fim_suf 9, fim_mid 10, fim_sep 5; FIM_REP is
found by its text, "<reponame>"), so both sides read the same FIM tokens.
The reference prompt is llama.cpp's layout (tools/server server-common.cpp,
format_prompt_infill, transcribed below) over llama.cpp's own tokenizer and
FIM ids (llama-cpp-python); the continuation is checked against llama.cpp's
logits for that prompt, teacher-forced (two logits within 0.5 are a tie, as
in the other tests against llama.cpp's Q4_1 kernels).

Checked: the prompt's ids (gRPC prompt_logprobs carry each id) equal the
reference's, with files, both orders and the budgets (a prefix and a suffix
longer than theirs); the generated ids are llama.cpp's argmax at every step;
/infill's response shape (content, tokens, stop, stop_type, timings, prompt),
streamed (no [DONE]) equal to not; `suffix` through the SDK gives /infill's
answer for the same text; stop words and the refusals.

Exit status: 0 passed, 1 failed, 77 skipped (model, SDK, grpcio, gguf or
llama_cpp absent).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_test import Failures, load_stubs, skip  # noqa: E402
import http_test  # noqa: E402
from http_test import parse_args_or_skip, raw, run_setup, sse_events  # noqa: E402

CTX = 4096          # above llama-server's batch (2048), so files fit in the budget
BATCH = 2048        # llama-server's default --batch-size: the budgets' B
FIM_IDS = {"fim_pre": 8, "fim_suf": 9, "fim_mid": 10, "fim_sep": 5}


def make_fim_model(src, workdir):
    out = os.path.join(workdir, "SmolLM2-fim.gguf")
    argv = [sys.executable, "-m", "gguf.scripts.gguf_new_metadata", src, out, "--force"]
    for name, tok in FIM_IDS.items():
        argv += ["--special-token-by-id", name, str(tok)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


class Reference:
    """llama.cpp's tokenizer, FIM ids and logits for the model."""

    def __init__(self, model):
        import llama_cpp
        # Logits for short prompts only (all rows are kept: n_ctx x n_vocab).
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=512, logits_all=True, verbose=False)
        v = llama_cpp.llama_model_get_vocab(self.llm.model)
        self.pre = llama_cpp.llama_vocab_fim_pre(v)
        self.suf = llama_cpp.llama_vocab_fim_suf(v)
        self.mid = llama_cpp.llama_vocab_fim_mid(v)
        self.rep = llama_cpp.llama_vocab_fim_rep(v)
        self.sep = llama_cpp.llama_vocab_fim_sep(v)
        self.add_bos = llama_cpp.llama_vocab_get_add_bos(v)
        self.bos = llama_cpp.llama_vocab_bos(v)

    def tok(self, text, special=False):
        return self.llm.tokenize(text.encode(), add_bos=False, special=special)

    def layout(self, prefix, suffix, prompt="", extra=(), n_predict=-1, spm=False):
        """format_prompt_infill of llama.cpp's server with its defaults (n_batch
        BATCH, the server's n_predict -1), then strata's cut where the prompt
        would leave less than the request's n_predict (at least 1): the files'
        start, the prefix's start, the suffix's end."""
        extra_tokens = []
        if self.rep >= 0:
            extra_tokens += [self.rep] + self.tok("myproject\n")
        for chunk in extra:
            if self.sep >= 0:
                extra_tokens += [self.sep] + self.tok(chunk.get("filename", "tmp") + "\n")
            else:
                extra_tokens += self.tok("\n\n--- snippet ---\n\n")
            extra_tokens += self.tok(chunk["text"])
        if self.sep >= 0:
            extra_tokens += [self.sep] + self.tok("filename\n")
        t_prefix, t_suffix = self.tok(prefix), self.tok(suffix)
        t_prompt = self.tok(prompt, special=True)
        n_prefix = min(len(t_prefix), 3 * (BATCH // 4))
        n_suffix = min(len(t_suffix), max(0, BATCH // 4 - (2 + len(t_prompt))))
        n_extra = min(max(0, CTX - BATCH - 2 * -1), len(extra_tokens))
        over = ((1 if self.add_bos else 0) + 3 + len(t_prompt) + n_extra + n_prefix + n_suffix
                - (CTX - max(1, n_predict)))
        cut = min(max(over, 0), n_extra)
        n_extra, over = n_extra - cut, over - cut
        cut = min(max(over, 0), n_prefix)
        n_prefix, over = n_prefix - cut, over - cut
        n_suffix -= min(max(over, 0), n_suffix)
        t_prefix = [self.pre] + t_prefix[len(t_prefix) - n_prefix:] + t_prompt
        t_suffix = [self.suf] + t_suffix[:n_suffix]
        first, second = (t_suffix, t_prefix) if spm else (t_prefix, t_suffix)
        ids = ([self.bos] if self.add_bos else []) + first
        ids = (extra_tokens[len(extra_tokens) - n_extra:] if n_extra else []) + ids
        return ids + second + [self.mid]

    def eog_ids(self):
        import llama_cpp
        v = llama_cpp.llama_model_get_vocab(self.llm.model)
        return [i for i in range(self.llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(v, i)]

    def disagreements(self, prompt, generated, ban_eog=False):
        """Steps where `generated` is not llama.cpp's argmax (ties within 0.5
        allowed), its end-of-generation tokens banned with ban_eog (llama.cpp's
        ignore_eos): [(step, ours, theirs, gap)]."""
        import numpy as np
        self.llm.reset()
        self.llm.eval(prompt + generated)
        scores = np.array(self.llm.scores[len(prompt) - 1:len(prompt) - 1 + len(generated)])
        if ban_eog:
            scores[:, self.eog_ids()] = -np.inf
        out = []
        for step, tok in enumerate(generated):
            want = int(np.argmax(scores[step]))
            gap = float(scores[step][want] - scores[step][tok])
            if tok != want and gap > 0.5:
                out.append((step, tok, want, gap))
        return out


def grpc_prompt_ids(stub, pb, infill, max_tokens=1):
    """The prompt's ids after the first, as the last stage scored them."""
    req = pb.GenerateRequest(max_tokens=max_tokens, prompt_logprobs=0, ignore_eos=True)
    req.infill.CopyFrom(infill)
    req.sampling.temperature = 0
    ids, usage = None, None
    for r in stub.Generate(req, timeout=300):
        if r.HasField("done"):
            ids = [c.id for c in r.done.prompt_logprobs]
            usage = r.done.usage
    return ids, usage


def check_infill(args, f, ref, host, grpc_address, stubs, label):
    pb, pb_grpc, grpc = stubs
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(grpc_address))
    files = [{"filename": "util.py", "text": "def add(a, b):\n    return a + b\n"},
             {"text": "MAX = 10\n"}]
    prefix = "import util\n\ndef total(xs):\n    s = 0\n    for x in xs:\n"
    suffix = "\n    return s\n"
    typed = "        s"

    # The prompt's ids, exactly: gRPC scores every prompt token after the
    # first and names it.
    fim = pb.FillInMiddle(prefix=prefix, suffix=suffix, prompt=typed)
    for c in files:
        x = fim.extra.add(text=c["text"])
        if "filename" in c:
            x.filename = c["filename"]
    want = ref.layout(prefix, suffix, typed, files, n_predict=1)
    got, usage = grpc_prompt_ids(stub, pb, fim)
    f.check(got == want[1:] and usage.prompt_tokens == len(want),
            f"{label}: gRPC infill's prompt == llama.cpp's /infill layout ({len(want)} ids, "
            f"files, FIM_REP {ref.rep} and FIM_SEP {ref.sep})")
    fim.suffix_first = True
    got, _ = grpc_prompt_ids(stub, pb, fim)
    want_spm = ref.layout(prefix, suffix, typed, files, n_predict=1, spm=True)
    f.check(got == want_spm[1:] and want_spm != want,
            f"{label}: suffix_first: the suffix before the prefix, as --spm-infill")
    # Budgets: 2000+ prefix tokens keep their last 1536, 600+ suffix tokens
    # their first 510 - |prompt|.
    long_prefix = "".join(f"x{i} = {i} * 2\n" for i in range(400))
    long_suffix = "".join(f"y{i} = x{i}\n" for i in range(200))
    lfim = pb.FillInMiddle(prefix=long_prefix, suffix=long_suffix, prompt=typed)
    want_long = ref.layout(long_prefix, long_suffix, typed, n_predict=1)
    got, usage = grpc_prompt_ids(stub, pb, lfim)
    f.check(len(ref.tok(long_prefix)) > 1536 and len(ref.tok(long_suffix)) > 512 and
            got == want_long[1:],
            f"{label}: budgets as llama.cpp's: {len(ref.tok(long_prefix))} prefix and "
            f"{len(ref.tok(long_suffix))} suffix tokens -> a prompt of {len(want_long)}")

    # /infill greedy: llama.cpp's argmax at every step, the response's shape.
    body = {"input_prefix": prefix, "input_suffix": suffix, "prompt": typed,
            "input_extra": files, "n_predict": 16, "temperature": 0, "return_tokens": True,
            "ignore_eos": True}
    st, _, out = raw(host, "POST", "/infill", timeout=900, body=body)
    r = json.loads(out)
    want = ref.layout(prefix, suffix, typed, files, n_predict=16)
    f.check(st == 200 and r["tokens_evaluated"] == len(want) and
            r["prompt"] == ref.llm.detokenize(want, special=True).decode(errors="replace"),
            f"{label}: /infill's prompt is the layout ({r.get('tokens_evaluated')} tokens)")
    bad = ref.disagreements(want, r["tokens"], ban_eog=True)
    f.check(len(r["tokens"]) == 16 and not bad,
            f"{label}: /infill's 16 greedy ids (ignore_eos) are llama.cpp's argmax at every "
            f"step, its end-of-generation tokens banned (disagreements: {bad})")
    detok = ref.llm.detokenize(r["tokens"]).decode(errors="replace")
    f.check(r["content"] == detok and r["stop"] is True and r["stop_type"] == "limit" and
            r["tokens_predicted"] == 16 and r["timings"]["predicted_n"] == 16 and
            r["timings"]["prompt_n"] + r["timings"]["cache_n"] == len(want) and
            r["generation_settings"]["n_predict"] == 16 and r["truncated"] is False,
            f"{label}: /infill's response: content {r['content']!r}, stop_type limit, timings")

    # Streamed: the same text and ids; the last event stops; no [DONE].
    events = sse_events(host, "/infill", dict(body, stream=True))
    parsed = [json.loads(e) for e in events]
    text = "".join(e["content"] for e in parsed)
    ids = [t for e in parsed[:-1] for t in e["tokens"]]
    f.check(text == r["content"] and ids == r["tokens"] and parsed[-1]["stop"] is True and
            all(e["stop"] is False for e in parsed[:-1]) and parsed[-1]["content"] == "" and
            parsed[-1]["tokens_predicted"] == 16 and b"[DONE]" not in events,
            f"{label}: /infill streamed == not streamed ({len(parsed)} events)")

    # A stop word: stop_type "word", stopping_word, the text before it.
    # (Two characters first seen past the start of the text.)
    content = r["content"]
    k = next((k for k in range(1, len(content) - 1)
              if content[k:k + 2].strip() and content.find(content[k:k + 2]) == k), None)
    if k is None:
        f.check(False, f"{label}: no stop word to try in {content!r}")
    else:
        word = content[k:k + 2]
        st, _, out = raw(host, "POST", "/infill", timeout=900, body=dict(body, stop=[word]))
        s = json.loads(out)
        f.check(st == 200 and s["stop_type"] == "word" and s["stopping_word"] == word and
                s["content"] == content[:k],
                f"{label}: stop {word!r}: stop_type word, content {s['content']!r}")

    # Budgets past the context: 9000 tokens of files and a long prefix and
    # suffix in a context of CTX with n_predict 64 are cut to leave 64.
    big = [{"filename": f"f{i}.py", "text": long_prefix} for i in range(2)]
    want_big = ref.layout(long_prefix, long_suffix, typed, big, n_predict=64)
    st, _, out = raw(host, "POST", "/infill", timeout=900, body={
        "input_prefix": long_prefix, "input_suffix": long_suffix, "prompt": typed,
        "input_extra": big, "n_predict": 64, "temperature": 0, "ignore_eos": True})
    b = json.loads(out)
    f.check(st == 200 and len(want_big) == CTX - 64 and b.get("tokens_evaluated") == len(want_big)
            and b["prompt"] == ref.llm.detokenize(want_big, special=True).decode(errors="replace")
            and b["tokens_predicted"] == 64,
            f"{label}: a prompt past the budgets is cut to leave n_predict ({st}, "
            f"{b.get('tokens_evaluated')} of {CTX} tokens, 64 generated)")

    # llama.cpp's code-completion fields.
    plain_body = {"input_prefix": prefix, "input_suffix": suffix, "prompt": typed,
                  "input_extra": files, "n_predict": 48, "temperature": 0, "ignore_eos": True,
                  "return_tokens": True}
    st, _, out = raw(host, "POST", "/infill", timeout=900, body=plain_body)
    plain = json.loads(out)
    eog = set(ref.eog_ids())
    f.check(st == 200 and len(plain["tokens"]) == 48 and not eog & set(plain["tokens"]),
            f"{label}: ignore_eos bans the end-of-generation tokens, as llama.cpp's "
            f"({len(eog)} of them; none in 48 greedy ids)")
    st, _, out = raw(host, "POST", "/infill", timeout=900, body=dict(plain_body, response_fields=[
        "content", "timings/predicted_n", "nothing/here"]))
    f.check(st == 200 and json.loads(out) == {"content": plain["content"],
                                              "timings/predicted_n": 48},
            f"{label}: response_fields: only those, nested ones under flat keys")
    # n_indent: the first line indented less than asked is cut before its text.
    text = plain["content"]
    nl = text.find("\n")
    if nl < 0 or not text[nl + 1:].strip():
        f.check(False, f"{label}: n_indent: no second line to cut in {text!r}")
    else:
        p = nl + 1
        while p < len(text) and text[p] in " \t":
            p += 1
        n_indent = (p - nl - 1) + 1  # one more than the second line has
        for stream in (False, True):
            body = dict(plain_body, n_indent=n_indent, stream=stream)
            if stream:
                ev = [json.loads(e) for e in sse_events(host, "/infill", body)]
                got, last = "".join(e["content"] for e in ev), ev[-1]
            else:
                st, _, out = raw(host, "POST", "/infill", timeout=900, body=body)
                last = json.loads(out)
                got = last["content"]
            f.check(got == text[:p] and last["stop_type"] == "limit",
                    f"{label}: n_indent {n_indent} (streamed {stream}): cut before the second "
                    f"line's text ({got!r})")
    # t_max_predict_ms: stops on a piece with a newline once the time passed
    # (here 1 ms: at the first or the second such piece).
    st, _, out = raw(host, "POST", "/infill", timeout=900, body=dict(plain_body, t_max_predict_ms=1))
    t = json.loads(out)
    pieces = [ref.llm.detokenize([x]).decode(errors="replace") for x in plain["tokens"]]
    newlines = [i for i, x in enumerate(pieces) if "\n" in x]
    k = len(t["tokens"])
    f.check(st == 200 and t["tokens"] == plain["tokens"][:k] and k - 1 in newlines[:2] and
            t["stop_type"] == "limit",
            f"{label}: t_max_predict_ms 1: stopped after the newline piece {k - 1} "
            f"(newline pieces {newlines[:3]})")
    # n_predict 0 (llama.vim's and llama.vscode's cache warm-up): 200, no
    # text; the next request finds the prompt in the prefix cache.
    warm = {"input_prefix": "# warm\n" + prefix, "input_suffix": suffix, "input_extra": files}
    st, _, out = raw(host, "POST", "/infill", timeout=900, body=dict(warm, n_predict=0, response_fields=[""]))
    f.check(st == 200 and json.loads(out) == {}, f"{label}: n_predict 0 with response_fields "
                                                 f"[\"\"] -> 200 {{}} ({out[:80]!r})")
    st, _, out = raw(host, "POST", "/infill", timeout=900, body=dict(warm, n_predict=0))
    w = json.loads(out)
    st2, _, out2 = raw(host, "POST", "/infill", timeout=900, body=dict(warm, n_predict=4, temperature=0))
    n = json.loads(out2)
    f.check(st == 200 and w["content"] == "" and w["tokens_predicted"] == 0 and st2 == 200 and
            n["timings"]["cache_n"] >= 16,
            f"{label}: n_predict 0: no text; then {n['timings']['cache_n']} of "
            f"{n['tokens_evaluated']} prompt tokens from the prefix cache")

    # /v1/completions with suffix (the SDK): /infill's answer for the same
    # prefix and suffix (no typed prompt, no files).
    import openai
    client = openai.OpenAI(base_url=f"http://{host}/v1", api_key="none")
    model = client.models.list().data[0].id
    # (Without ignore_eos: /infill's bans the end tokens, as llama.cpp's;
    # the OpenAI endpoints' lets them pass, as vLLM's.)
    c = client.completions.create(model=model, prompt=prefix, suffix=suffix, max_tokens=10,
                                  temperature=0)
    st, _, out = raw(host, "POST", "/infill", timeout=900, body={"input_prefix": prefix, "input_suffix": suffix,
                                                   "n_predict": 10, "temperature": 0})
    i = json.loads(out)
    want = ref.layout(prefix, suffix, n_predict=10)
    f.check(c.usage.prompt_tokens == len(want) == i["tokens_evaluated"] and
            c.choices[0].text == i["content"],
            f"{label}: completions with suffix == /infill ({c.choices[0].text!r})")
    # Refusals.
    st, _, out = raw(host, "POST", "/infill", timeout=900, body={"input_prefix": "a"})
    f.check(st == 400 and "input_suffix: missing" in json.loads(out)["error"]["message"],
            f"{label}: /infill without input_suffix: 400 naming it")
    st, _, out = raw(host, "POST", "/infill", timeout=900, body={"input_prefix": "a", "input_suffix": "b",
                                                   "input_extra": [{"filename": "f"}]})
    f.check(st == 400 and "input_extra[0].text: missing" in json.loads(out)["error"]["message"],
            f"{label}: an extra file without text: 400 naming it")
    st, _, out = raw(host, "GET", "/infill")
    f.check(st == 405, f"{label}: GET /infill: 405")
    check_llama_completion(f, ref, host, label)


def check_llama_completion(f, ref, host, label):
    """llama.cpp server's /completion: the prompt tokenized as llama.cpp's
    server does (BOS as the model asks, special-token text read as special),
    greedy ids llama.cpp's argmax at every step, /infill's response shape
    and llama.cpp's sampling defaults, streamed == not, token-id prompts,
    n_predict 0, and the refusals."""
    text = "def fibonacci(n):\n    <|im_start|>"
    body = {"prompt": text, "n_predict": 12, "temperature": 0, "return_tokens": True,
            "ignore_eos": True}
    st, _, out = raw(host, "POST", "/completion", timeout=900, body=body)
    r = json.loads(out)
    want = ([ref.bos] if ref.add_bos else []) + ref.tok(text, special=True)
    f.check(st == 200 and r["tokens_evaluated"] == len(want) and
            r["prompt"] == ref.llm.detokenize(want, special=True).decode(errors="replace"),
            f"{label}: /completion's prompt is llama.cpp's tokenization ({len(want)} ids, "
            f"special-token text read as special)")
    bad = ref.disagreements(want, r["tokens"], ban_eog=True)
    f.check(len(r["tokens"]) == 12 and not bad and
            r["content"] == ref.llm.detokenize(r["tokens"]).decode(errors="replace") and
            r["stop"] is True and r["stop_type"] == "limit" and r["tokens_predicted"] == 12,
            f"{label}: /completion's 12 greedy ids are llama.cpp's argmax at every step "
            f"(disagreements: {bad}; content {r['content']!r})")
    events = [json.loads(e) for e in sse_events(host, "/completion", dict(body, stream=True))]
    f.check("".join(e["content"] for e in events) == r["content"] and
            [t for e in events[:-1] for t in e["tokens"]] == r["tokens"] and
            events[-1]["stop"] is True,
            f"{label}: /completion streamed == not streamed ({len(events)} events)")
    st, _, out = raw(host, "POST", "/completion", timeout=900,
                     body=dict(body, prompt=want, return_tokens=True))
    f.check(st == 200 and json.loads(out)["tokens"] == r["tokens"],
            f"{label}: /completion of the prompt's ids == of its text")
    st, _, out = raw(host, "POST", "/completion", timeout=900,
                     body={"prompt": text, "n_predict": 2})
    g = json.loads(out)["generation_settings"]
    f.check(st == 200 and abs(g["temperature"] - 0.8) < 1e-6 and g["top_k"] == 40 and
            abs(g["top_p"] - 0.95) < 1e-6 and abs(g["min_p"] - 0.05) < 1e-6,
            f"{label}: /completion's sampling defaults are llama.cpp's ({g})")
    st, _, out = raw(host, "POST", "/completion", timeout=900,
                     body=dict(body, logit_bias=[[r["tokens"][0], False]]))
    banned = json.loads(out)
    f.check(st == 200 and banned["tokens"][0] != r["tokens"][0],
            f"{label}: /completion logit_bias [[{r['tokens'][0]}, false]] (llama.cpp's form) bans "
            f"the greedy first token (now {banned['tokens'][:1]})")
    st, _, out = raw(host, "POST", "/completions", timeout=900, body=body)
    a = json.loads(out)
    f.check(st == 200 and a["tokens"] == r["tokens"] and a["content"] == r["content"],
            f"{label}: /completions (llama.cpp's alias) == /completion")
    st, _, out = raw(host, "POST", "/completion", timeout=900,
                     body={"prompt": text, "n_predict": -1, "temperature": -1,
                           "json_schema": {"type": "object", "properties": {
                               "answer": {"type": "integer"}}, "required": ["answer"]}})
    j = json.loads(out)
    try:
        parsed = json.loads(j["content"])
    except (ValueError, KeyError):
        parsed = None
    f.check(st == 200 and j["generation_settings"]["n_predict"] == -1 and
            j["generation_settings"]["temperature"] == 0 and j["stop_type"] == "eos" and
            isinstance(parsed, dict) and isinstance(parsed.get("answer"), int),
            f"{label}: /completion json_schema (llama.cpp's field): {j.get('content')!r}; "
            f"n_predict -1 shown as -1, temperature -1 greedy")
    st, _, out = raw(host, "POST", "/completion", timeout=900, body={"prompt": text, "n_predict": 0})
    w = json.loads(out)
    f.check(st == 200 and w["content"] == "" and w["tokens_predicted"] == 0,
            f"{label}: /completion n_predict 0: no text")
    for bad_body, param in (({"n_predict": 3}, "prompt: missing"),
                            ({"prompt": ["a", "b"]}, "prompt: one prompt per /completion"),
                            ({"prompt": "a", "n": 2}, "n: one completion per /completion")):
        st, _, out = raw(host, "POST", "/completion", timeout=900, body=bad_body)
        f.check(st == 400 and param in json.loads(out)["error"]["message"],
                f"{label}: /completion {bad_body}: 400 {param!r}")


def main():
    args = parse_args_or_skip()
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        skip(f"{e.name} is absent (scripts/install-test-tools.sh installs it)")
    http_test.CTX = CTX
    with tempfile.TemporaryDirectory(prefix="strata-infill-") as workdir:
        args.model = make_fim_model(args.model, workdir)
        ref = Reference(args.model)
        stubs = load_stubs(args.proto_dir, workdir)
        f = Failures()
        f.check((ref.pre, ref.suf, ref.mid, ref.sep) == (8, 9, 10, 5) and ref.rep >= 0,
                f"llama.cpp reads the copy's FIM ids (rep {ref.rep} by its text)")
        return run_setup(args, workdir, stubs, f,
                         lambda procs, host, address, label:
                         check_infill(args, f, ref, host, address, stubs, label))


if __name__ == "__main__":
    sys.exit(main())
