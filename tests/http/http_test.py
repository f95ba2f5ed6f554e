#!/usr/bin/env python3
"""The OpenAI-compatible HTTP API end to end: the official `openai` SDK
(PyPI, unchanged, base_url=http://HOST:PORT/v1) and raw sockets against
`strata serve` (--setup serve) or a strata-coordinator with 2 strata-worker
processes (--setup cluster), all on 127.0.0.1 with SmolLM2.

Checked: models; chat and completions, streamed and not, greedy streamed
text equal to the whole response; usage (cached_tokens 0); logprobs in the
chat and the completions shapes; n > 1; logit_bias against llama.cpp's
logits (check_logit_bias); prompt_logprobs and echo (check_prompt_logprobs);
a prompt the client templated (check_client_templated_prompt); stop strings never in the output;
every SSE chunk valid UTF-8; errors as OpenAI error objects with their
status (400 naming the param, 404, 405, 413, 401, 400 with both numbers for
a prompt over the context); hostile HTTP (malformed JSON, wrong types,
invalid UTF-8, a huge body, a slow sender, 1000 idle connections) with the
server answering correctly throughout; a client that hangs up mid-stream
frees its sequence (waited for on the gRPC ClusterStatus); the bearer
token on HTTP and gRPC (serve); /health 503 once a worker is gone (cluster).

Exit status: 0 passed, 1 failed, 77 skipped (model, SDK or grpcio absent).
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from cluster_test import Failures, free_port, load_stubs, model_dirs, skip  # noqa: E402

CTX = 1024
SERVED_NAME = "SmolLM2 135M (test)"  # --served-model-name / served_model_name


class Proc:
    """A child that prints "listening on A" and, with HTTP, "http listening on B"."""

    def __init__(self, name, argv, workdir, http=True, env=None):
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, env=env)
        lines = []
        want = 2 if http else 1
        t = threading.Thread(target=lambda: [lines.append(self.p.stdout.readline())
                                             for _ in range(want)], daemon=True)
        t.start()
        t.join(180)
        lines = [x.decode(errors="replace").strip() for x in lines]
        if len(lines) < want or not lines[0].startswith("listening on "):
            self.kill()
            raise RuntimeError(f"{name} did not start: {lines}; {self.tail()}")
        self.address = lines[0].split()[-1]
        self.http = lines[1].split()[-1] if http else None
        if http and not lines[1].startswith("http listening on "):
            raise RuntimeError(f"{name}: second line {lines[1]!r}")
        threading.Thread(target=lambda: [None for _ in self.p.stdout], daemon=True).start()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.log.close()

    def tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def start_serve(args, workdir, name="serve", extra=(), env=None):
    return Proc(name, [args.strata, "serve", args.model, "-t", "1", "-c", str(CTX),
                       "--max-sequences", "4", "--listen", f"127.0.0.1:{free_port()}",
                       "--http", "127.0.0.1:0", "--served-model-name", SERVED_NAME, *extra],
                workdir, env=env)


def start_cluster(args, workdir, extra_config=""):
    procs = []
    ports = [free_port() for _ in range(2)]
    for i, port in enumerate(ports):
        cfg = os.path.join(workdir, f"worker-{i}.yaml")
        with open(cfg, "w") as f:
            f.write(f"listen: 127.0.0.1:{port}\nname: w{i}\nthreads: 1\nmemory_budget: 8GiB\n"
                    f"model_dirs: [{model_dirs(args.model)}]\nanswer_timeout_ms: 120000\n"
                    "insecure: true\n")  # loopback: plaintext links
        procs.append(Proc(f"worker-{i}", [args.worker, "--config", cfg], workdir, http=False))
    cfg = os.path.join(workdir, "cluster.yaml")
    with open(cfg, "w") as f:
        f.write(f"model: {args.model}\nlisten: 127.0.0.1:{free_port()}\n"
                f"http_listen: 127.0.0.1:0\ncontext_length: {CTX}\nmax_sequences: 4\n"
                "health_check_interval_ms: 300\nhealth_check_timeout_ms: 1000\n"
                f"health_check_failures: 2\ninsecure: true\nserved_model_name: {SERVED_NAME}\n"
                + extra_config + "workers:\n"
                + "".join(f"  - address: 127.0.0.1:{p}\n    name: w{i}\n"
                          for i, p in enumerate(ports)))
    coordinator = Proc("coordinator", [args.coordinator, "--config", cfg], workdir)
    return coordinator, procs


def raw(host, method, path, body=None, headers=None, timeout=60):
    """One request on a fresh connection: (status, headers, body bytes)."""
    h, p = host.rsplit(":", 1)
    c = http.client.HTTPConnection(h, int(p), timeout=timeout)
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=hdrs)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def sse_events(host, path, body):
    """A streamed request read raw: the `data:` payloads as bytes, in order."""
    h, p = host.rsplit(":", 1)
    c = http.client.HTTPConnection(h, int(p), timeout=120)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    data = r.read()  # chunked decoding by http.client
    c.close()
    events = []
    for block in data.split(b"\n\n"):
        if block.startswith(b"data: "):
            events.append(block[6:])
    return events


def error_of(status_body):
    status, _, body = status_body
    try:
        return status, json.loads(body)["error"]
    except (ValueError, KeyError):
        return status, {"message": body[:200]}


def post_bytes(path, body):
    """A raw HTTP/1.1 POST of a JSON body (bytes)."""
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def open_stream(h, p):
    """A raw socket streaming a long greedy completion, once its first event
    came (the sequence is running)."""
    s = socket.create_connection((h, int(p)))
    s.sendall(post_bytes("/v1/completions", json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 800, "ignore_eos": True,
         "temperature": 0, "stream": True}).encode()))
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    return s


def wait_active_zero(stub, pb, timeout=120, metadata=None):
    """Polls ClusterStatus until no sequence is active; returns the last count."""
    end = time.time() + timeout
    active = None
    while time.time() < end:
        active = stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5,
                                    metadata=metadata).active_sequences
        if active == 0:
            return 0
        time.sleep(0.02)
    return active


def check_api(args, f, host, grpc_address, stubs, label):
    import openai
    pb, pb_grpc, grpc = stubs
    client = openai.OpenAI(base_url=f"http://{host}/v1", api_key="unused", max_retries=0,
                           timeout=120)
    models = client.models.list().data
    f.check(len(models) == 1 and models[0].object == "model" and models[0].id == SERVED_NAME,
            f"{label}: models.list ({[m.id for m in models]}: the served model name)")
    # The id has spaces (SERVED_NAME): the SDK percent-encodes it.
    f.check(client.models.retrieve(models[0].id).id == models[0].id, f"{label}: models.retrieve")
    model = models[0].id

    msgs = [{"role": "user", "content": "Write a short sentence about the sea."}]
    whole = client.chat.completions.create(model=model, messages=msgs, max_tokens=24,
                                           temperature=0)
    text = whole.choices[0].message.content
    f.check(bool(text) and whole.choices[0].finish_reason in ("stop", "length"),
            f"{label}: chat completion ({whole.choices[0].finish_reason}): {text!r}")
    u = whole.usage
    f.check(u.prompt_tokens > 0 and u.completion_tokens > 0 and
            u.total_tokens == u.prompt_tokens + u.completion_tokens and
            u.prompt_tokens_details.cached_tokens == 0, f"{label}: chat usage {u}")
    streamed, usage, finish, roles = "", None, None, 0
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=24,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            streamed += c.delta.content or ""
            roles += 1 if c.delta.role == "assistant" else 0
            finish = c.finish_reason or finish
    f.check(streamed == text, f"{label}: greedy chat streamed == whole ({streamed!r})")
    f.check(usage is not None and usage.completion_tokens == u.completion_tokens and
            finish == whole.choices[0].finish_reason and roles == 1,
            f"{label}: chat stream usage and finish_reason")

    prompt = "The capital of France is"
    comp = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0)
    ctext = "".join(c.choices[0].text for c in client.completions.create(
        model=model, prompt=prompt, max_tokens=12, temperature=0, stream=True) if c.choices)
    f.check(comp.choices[0].text == ctext and comp.choices[0].text,
            f"{label}: greedy completion streamed == whole ({ctext!r})")
    f.check(comp.usage.completion_tokens == 12 and comp.choices[0].finish_reason == "length",
            f"{label}: completion max_tokens -> length")

    # Logprobs: chat shape, then completions shape.
    lp = client.chat.completions.create(model=model, messages=msgs, max_tokens=8,
                                        temperature=0, logprobs=True, top_logprobs=3)
    content = lp.choices[0].logprobs.content
    ok = len(content) == lp.usage.completion_tokens and all(
        len(t.top_logprobs) == 3 and t.logprob <= 0 and
        abs(t.logprob - max(x.logprob for x in t.top_logprobs)) < 1e-4 for t in content)
    f.check(ok, f"{label}: chat logprobs (greedy picks the top)")
    clp = client.completions.create(model=model, prompt=prompt, max_tokens=6, temperature=0,
                                    logprobs=2)
    l2 = clp.choices[0].logprobs
    f.check(len(l2.tokens) == 6 and len(l2.token_logprobs) == 6 and
            all(len(t) <= 2 for t in l2.top_logprobs) and l2.text_offset[0] == 0,
            f"{label}: completions logprobs")

    # n > 1 with a seed.
    many = client.chat.completions.create(model=model, messages=msgs, max_tokens=8,
                                          temperature=1.0, seed=7, n=3)
    f.check(len(many.choices) == 3 and sorted(c.index for c in many.choices) == [0, 1, 2],
            f"{label}: n=3 gives 3 choices")
    # Streamed n > 1: one choice a chunk (OpenAI's; a client reading
    # choices[0] of each chunk sees each choice's role and text).
    per_chunk, roles, texts = [], set(), {0: "", 1: ""}
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=6,
                                                temperature=1.0, seed=7, n=2, stream=True):
        per_chunk.append(len(chunk.choices))
        for c in chunk.choices:
            if c.delta.role == "assistant":
                roles.add(c.index)
            texts[c.index] += c.delta.content or ""
    f.check(set(per_chunk) == {1} and roles == {0, 1} and
            [texts[0], texts[1]] == [c.message.content for c in client.chat.completions.create(
                model=model, messages=msgs, max_tokens=6, temperature=1.0, seed=7, n=2).choices],
            f"{label}: streamed n=2: one choice a chunk ({per_chunk}), a role for each")
    # Completions' top_logprobs: most likely first, and the sampled token
    # always there (up to logprobs + 1 entries), as OpenAI's legacy API.
    sampled = client.completions.create(model=model, prompt=prompt, max_tokens=12,
                                        temperature=1.5, seed=11, logprobs=1)
    lp1 = sampled.choices[0].logprobs
    ordered = all(list(d.values()) == sorted(d.values(), reverse=True) for d in lp1.top_logprobs)
    f.check(all(tok in d and abs(d[tok] - v) < 1e-6 and 1 <= len(d) <= 2
                for tok, v, d in zip(lp1.tokens, lp1.token_logprobs, lp1.top_logprobs)) and
            any(len(d) == 2 for d in lp1.top_logprobs) and ordered,
            f"{label}: completions top_logprobs most likely first, with the sampled token "
            f"({lp1.top_logprobs[:3]})")

    check_logit_bias(args, f, client, model, host, grpc_address, stubs, label)
    check_prompt_logprobs(args, f, client, model, host, grpc_address, stubs, label)

    # Stop strings never leak, streamed or not.
    long = client.completions.create(model=model, prompt=prompt, max_tokens=24,
                                     temperature=0).choices[0].text
    stop = long[len(long) // 2:len(long) // 2 + 3]
    if stop.strip():
        s1 = client.completions.create(model=model, prompt=prompt, max_tokens=24,
                                       temperature=0, stop=[stop])
        s2 = "".join(c.choices[0].text for c in client.completions.create(
            model=model, prompt=prompt, max_tokens=24, temperature=0, stop=stop, stream=True)
            if c.choices)
        f.check(stop not in s1.choices[0].text and s1.choices[0].finish_reason == "stop" and
                s1.choices[0].text == long[:long.find(stop)] and s2 == s1.choices[0].text,
                f"{label}: stop {stop!r} does not leak ({s1.choices[0].text!r})")

    # Every SSE chunk is valid UTF-8, also where characters span tokens.
    events = sse_events(host, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Écris une phrase avec des emojis 🌊🐟 et du "
                                                 "chinois 大海."}],
        "max_tokens": 48, "temperature": 0.9, "seed": 3, "stream": True})
    bad = 0
    for e in events:
        try:
            e.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            bad += 1
    f.check(events and events[-1] == b"[DONE]" and bad == 0,
            f"{label}: {len(events)} SSE chunks, all valid UTF-8, ending [DONE]")

    # Errors through the SDK.
    try:
        client.chat.completions.create(model="no-such-model", messages=msgs, max_tokens=2)
        f.check(False, f"{label}: unknown model refused")
    except openai.NotFoundError as e:
        f.check(e.status_code == 404 and e.body.get("code") == "model_not_found",
                f"{label}: unknown model -> 404 model_not_found")
    try:
        client.chat.completions.create(model=model, messages=msgs, temperature="hot")
        f.check(False, f"{label}: wrong type refused")
    except openai.BadRequestError as e:
        f.check(e.status_code == 400 and e.body.get("param") == "temperature",
                f"{label}: temperature 'hot' -> 400 param temperature")
    try:
        client.completions.create(model=model, prompt="word " * (CTX + 100), max_tokens=4)
        f.check(False, f"{label}: long prompt refused")
    except openai.BadRequestError as e:
        msg = e.body.get("message", "")
        f.check(e.status_code == 400 and str(CTX) in msg and "exceed" in msg,
                f"{label}: prompt over the context -> 400 with both numbers ({msg})")
    # Tools: rendered and parsed (tests/http/tools_test.py covers calls);
    # SmolLM2's own template writes no call format, so forcing a call is a
    # 400 naming tool_choice.
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    r = client.chat.completions.create(model=model, messages=msgs, tools=tools, max_tokens=4,
                                       temperature=0)
    f.check(r.choices[0].finish_reason in ("stop", "length"), f"{label}: tools accepted")
    try:
        client.chat.completions.create(model=model, messages=msgs, tools=tools, max_tokens=4,
                                       tool_choice="required")
        f.check(False, f"{label}: tool_choice required refused without a call format")
    except openai.BadRequestError as e:
        f.check(e.body.get("param") == "tool_choice",
                f"{label}: tool_choice required without a call format -> 400 tool_choice")

    # Structured output through the SDK: a JSON Schema, sampled (temperature
    # 1, several seeds) streamed and not; every finished answer parses and
    # validates (jsonschema when installed, else the checks below).
    schema = {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 12},
                             "age": {"type": "integer"},
                             "pets": {"type": "array", "items": {"enum": ["cat", "dog"]},
                                      "maxItems": 3}},
              "required": ["name", "age", "pets"], "additionalProperties": False}
    try:
        import jsonschema
        valid = lambda v: jsonschema.validate(v, schema) is None  # noqa: E731
    except ImportError:
        def valid(v):
            return (isinstance(v, dict) and set(v) == {"name", "age", "pets"} and
                    isinstance(v["name"], str) and len(v["name"]) <= 12 and
                    isinstance(v["age"], int) and not isinstance(v["age"], bool) and
                    isinstance(v["pets"], list) and len(v["pets"]) <= 3 and
                    all(p in ("cat", "dog") for p in v["pets"]))
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    answers, finished = 0, 0
    for seed in range(4):
        for stream in (False, True):
            kw = dict(model=model, messages=[{"role": "user", "content": "Describe a person."}],
                      response_format=rf, max_tokens=96, temperature=1.0, seed=seed)
            if stream:
                text, finish = "", None
                for ch in client.chat.completions.create(stream=True, **kw):
                    if ch.choices:
                        text += ch.choices[0].delta.content or ""
                        finish = ch.choices[0].finish_reason or finish
            else:
                r = client.chat.completions.create(**kw)
                text, finish = r.choices[0].message.content, r.choices[0].finish_reason
            answers += 1
            if finish != "stop":
                continue  # cut by max_tokens: a prefix of a valid answer
            finished += 1
            try:
                ok = valid(json.loads(text))
            except Exception:  # noqa: BLE001 - any failure to parse or validate
                ok = False
            f.check(ok, f"{label}: json_schema answer (seed {seed}, stream {stream}) "
                        f"parses and validates: {text!r}")
    f.check(finished >= answers // 2,
            f"{label}: json_schema answers finished ({finished} of {answers})")

    # Raw HTTP: status codes and error objects.
    st, err = error_of(raw(host, "POST", "/v1/chat/completions", body="{not json"))
    f.check(st == 400 and "invalid JSON" in err["message"] and err["type"],
            f"{label}: malformed JSON -> 400")
    st, err = error_of(raw(host, "POST", "/v1/chat/completions",
                           body={"messages": [{"role": "user", "content": 7}]}))
    f.check(st == 400 and err.get("param") == "messages[0].content", f"{label}: wrong type -> 400")
    st, err = error_of(raw(host, "POST", "/v1/chat/completions",
                           body=b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}'))
    f.check(st == 400, f"{label}: invalid UTF-8 -> 400")
    st, err = error_of(raw(host, "POST", "/v1/chat/completions",
                           body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}))
    f.check(st == 400 and err.get("param") == "max_tokens", f"{label}: max_tokens 0 -> 400")
    for extra, param in (({"temperature": -0.1}, "temperature"),
                         ({"presence_penalty": 2.5}, "presence_penalty"),
                         ({"stream_options": {"include_usage": True}}, "stream_options")):
        st, err = error_of(raw(host, "POST", "/v1/chat/completions",
                               body=dict({"messages": [{"role": "user", "content": "hi"}]}, **extra)))
        f.check(st == 400 and err.get("param") == param,
                f"{label}: {extra} -> 400 naming {param}, as OpenAI and vLLM")
    # Fill in the middle on a model without FIM tokens (SmolLM2 has FIM_REP
    # only): refused naming what is missing (tests/http/infill_test.py
    # serves a copy with them).
    want = "infill: the model has no fill-in-the-middle tokens (missing: FIM_PRE, FIM_SUF, FIM_MID)"
    st, err = error_of(raw(host, "POST", "/infill", body={"input_prefix": "a", "input_suffix": "b"}))
    f.check(st == 400 and err["message"] == want, f"{label}: /infill without FIM tokens -> 400")
    st, err = error_of(raw(host, "POST", "/v1/completions", body={"prompt": "a", "suffix": "b"}))
    f.check(st == 400 and err["message"] == want and err.get("param") == "infill",
            f"{label}: completions with a suffix without FIM tokens -> 400 param infill")
    for path, body, param in (("/tokenize", {"content": "x", "parse_special": 1}, "parse_special"),
                              ("/detokenize", {"tokens": [1], "render_special": "yes"},
                               "render_special")):
        st, err = error_of(raw(host, "POST", path, body=body))
        f.check(st == 400 and err["message"] == f"{param}: expected a boolean",
                f"{label}: {path} with {param} not a boolean -> 400 ({err['message']!r})")
    st, _ = error_of(raw(host, "GET", "/v1/nothing"))
    f.check(st == 404, f"{label}: unknown path -> 404")
    st, hdrs, _ = raw(host, "GET", "/v1/chat/completions")
    f.check(st == 405 and hdrs.get("Allow") == "POST", f"{label}: GET on a POST route -> 405")
    try:
        st, _ = error_of(raw(host, "POST", "/v1/completions", body=b"x" * (9 << 20)))
    except (ConnectionError, OSError) as e:
        st = f"connection error {e}"
    f.check(st == 413, f"{label}: 9 MiB body -> 413 ({st})")
    st, _, body = raw(host, "GET", "/health")
    f.check(st == 200 and json.loads(body)["status"] == "ok", f"{label}: /health 200")
    # CORS (default: any origin, as llama.cpp's server and vLLM): a browser's
    # preflight, then its request.
    origin = {"Origin": "http://ui.example"}
    st, hdrs, _ = raw(host, "OPTIONS", "/v1/chat/completions",
                      headers={**origin, "Access-Control-Request-Method": "POST",
                               "Access-Control-Request-Headers": "authorization, content-type"})
    st2, hdrs2, _ = raw(host, "POST", "/v1/completions", headers=origin,
                        body={"prompt": "Hi", "max_tokens": 1})
    f.check(st == 204 and hdrs.get("Access-Control-Allow-Origin") == "*" and
            "POST" in hdrs.get("Access-Control-Allow-Methods", "") and
            hdrs.get("Access-Control-Allow-Headers") == "authorization, content-type" and
            st2 == 200 and hdrs2.get("Access-Control-Allow-Origin") == "*",
            f"{label}: CORS preflight 204 and Access-Control-Allow-Origin ({st}, {st2})")
    st, _, body = raw(host, "GET", "/metrics")
    f.check(st == 200 and b"strata:num_requests_running" in body and
            b"strata:num_requests_waiting" in body, f"{label}: /metrics")
    st, _, body = raw(host, "POST", "/tokenize", body={"content": "Hello world"})
    ids = json.loads(body)["tokens"] if st == 200 else []
    st2, _, body2 = raw(host, "POST", "/detokenize", body={"tokens": ids})
    f.check(st == 200 and ids and st2 == 200 and
            json.loads(body2)["content"].strip() == "Hello world",
            f"{label}: tokenize / detokenize round trip {ids}")

    check_client_templated_prompt(args, f, client, model, host, label)
    check_cache_salt(f, client, model, label)
    check_prompt_batch(f, client, model, label)

    # A client that hangs up mid-stream frees its sequence.
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(grpc_address))
    h, p = host.rsplit(":", 1)
    s = open_stream(h, p)
    active = stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).active_sequences
    s.close()
    f.check(active == 1 and wait_active_zero(stub, pb) == 0,
            f"{label}: hang-up mid-stream frees the sequence (active {active} -> 0)")

    # Clients that hang up right after sending, streamed or not, n 1 or 2,
    # while a stream keeps the pipeline busy (so a submission and its cancel
    # can reach the scheduler thread together): every request ends cancelled
    # (none is served).
    busy = open_stream(h, p)
    served = stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5).requests_served
    for k in range(24):
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 800, "ignore_eos": True,
                           "temperature": 0, "stream": k % 2 == 0, "n": 1 + k % 3 // 2}).encode()
        s = socket.create_connection((h, int(p)))
        s.sendall(post_bytes("/v1/completions", body))
        s.close()
    busy.close()
    def drained():
        end = time.time() + 120
        while time.time() < end:
            st = stub.ClusterStatus(pb.ClusterStatusRequest(), timeout=5)
            if st.active_sequences == 0 and st.queued_requests == 0:
                return st
            time.sleep(0.02)
        return st
    st = drained()
    f.check(st.active_sequences == 0 and st.queued_requests == 0 and
            st.requests_served == served,
            f"{label}: 24 hang-ups right after sending end cancelled (active "
            f"{st.active_sequences}, queued {st.queued_requests}, served "
            f"{served} -> {st.requests_served})")

    # A full queue: 429 with Retry-After; every other request, dropped by
    # its client, leaves the scheduler.
    import selectors
    sel = selectors.DefaultSelector()
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 500, "ignore_eos": True,
                       "temperature": 0}).encode()
    flood = []
    for _ in range(4 + 256 + 12):
        c = socket.create_connection((h, int(p)))
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ)
        flood.append(c)
    refused, retry_after, end = 0, True, time.time() + 60
    while refused == 0 and time.time() < end:
        for key, _ in sel.select(timeout=1):
            data = key.fileobj.recv(65536)
            sel.unregister(key.fileobj)
            if data.startswith(b"HTTP/1.1 429"):
                # The rest of the head, when the first read ended inside it
                # (a loaded machine splits writes).
                key.fileobj.settimeout(5)
                while b"\r\n\r\n" not in data:
                    more = key.fileobj.recv(65536)
                    if not more:
                        break
                    data += more
                refused += 1
                retry_after = retry_after and b"Retry-After: 1" in data
    for c in flood:
        c.close()
    sel.close()
    def waiting():
        _, _, m = raw(host, "GET", "/metrics")
        for line in m.decode().splitlines():
            if line.startswith("strata:num_requests_waiting"):
                return float(line.split()[-1])
        return -1
    # A bound, not a wait: the loop ends as soon as the queue is empty
    # (ASan on a loaded 2-core machine took over 30 s to drop 271 requests).
    end = time.time() + 180
    while waiting() != 0 and time.time() < end:
        time.sleep(0.05)
    f.check(refused > 0 and retry_after and waiting() == 0 and wait_active_zero(stub, pb) == 0,
            f"{label}: a full queue -> 429 with Retry-After ({refused}); the dropped "
            "requests all leave")

    # Hostile: a slow sender and 1000 idle connections; the server answers
    # each correctly meanwhile.
    slow = socket.create_connection((h, int(p)))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Len")
    idle = []
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    except (ImportError, ValueError, OSError):
        pass
    for _ in range(1000):
        idle.append(socket.create_connection((h, int(p))))
    st, _, _ = raw(host, "GET", "/health")
    ok = st == 200
    for c in idle:
        c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    answered = 0
    for c in idle:
        c.settimeout(30)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(4096)
            if not chunk:
                break
            data += chunk
        answered += data.startswith(b"HTTP/1.1 200")
        c.close()
    slow.close()
    again = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0)
    f.check(ok and answered == 1000 and again.choices[0].text == comp.choices[0].text,
            f"{label}: 1000 idle connections and a slow sender; all {answered} answered, "
            "generation unchanged")


def check_prompt_batch(f, client, model, label):
    """OpenAI's batch: prompt as an array of prompts (text and ids), n each.
    Choice p * n + i is what prompt p alone gives as its choice i (greedy
    and seeded, with echo and logprobs), streamed or not; usage sums the
    prompts' tokens; a bad prompt in the list is refused naming it."""
    import openai
    prompts = ["Once upon a time", "The capital of France is", [1, 2, 3, 4]]
    common = dict(model=model, max_tokens=6, n=2, temperature=0.8, seed=11, logprobs=1,
                  echo=True)
    batch = client.completions.create(prompt=prompts, **common)
    alone = [client.completions.create(prompt=p, **common) for p in prompts]
    want = [(c.text, c.logprobs.token_logprobs, c.finish_reason)
            for a in alone for c in sorted(a.choices, key=lambda c: c.index)]
    got = [(c.text, c.logprobs.token_logprobs, c.finish_reason)
           for c in sorted(batch.choices, key=lambda c: c.index)]
    f.check(got == want and [c.index for c in batch.choices] == list(range(6)),
            f"{label}: 3 prompts x n 2: each choice as its prompt alone "
            f"({[g[0][-24:] for g in got]})")
    f.check(batch.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone) and
            batch.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone),
            f"{label}: batch usage sums the prompts' ({batch.usage.prompt_tokens}, "
            f"{batch.usage.completion_tokens})")
    texts = {}
    for chunk in client.completions.create(prompt=prompts, stream=True, **common):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    f.check([texts.get(k) for k in range(6)] == [w[0] for w in want],
            f"{label}: the batch streamed, each index's text as not streamed")
    for bad, param in ((["fine", []], "prompt[1]"), ([[1, 60000], [5, 6]], "prompt[0][1]"),
                       ([[5, 6], [7, 60000]], "prompt[1][1]"),
                       (["fine", "word " * (CTX + 10)], "prompt[1]")):
        try:
            client.completions.create(prompt=bad, model=model, max_tokens=2)
            f.check(False, f"{label}: a bad prompt in a batch is refused ({param})")
        except openai.BadRequestError as e:
            f.check(e.body.get("param") == param and e.body["message"].startswith(param + ":"),
                    f"{label}: a bad prompt in a batch: 400 naming {param} ({e.body['message'][:80]})")
    # echo + logprobs copies the prompt's scores into every choice: bounded.
    long_prompt = "count the stars " * 150
    try:
        client.completions.create(prompt=long_prompt, model=model, max_tokens=1, n=128,
                                  echo=True, logprobs=20)
        f.check(False, f"{label}: 128 copies of a long prompt's scores are refused")
    except openai.BadRequestError as e:
        f.check(e.body.get("param") == "n" and "ask with n 1" in e.body["message"],
                f"{label}: 128 copies of a long prompt's scores: 400 ({e.body['message'][:90]})")
    two = client.completions.create(prompt=long_prompt, model=model, max_tokens=1, n=2,
                                    echo=True, logprobs=20)
    f.check(len(two.choices) == 2 and
            two.choices[0].logprobs.token_logprobs[:-1] == two.choices[1].logprobs.token_logprobs[:-1],
            f"{label}: n 2 of the same: both choices carry the prompt's scores")


def check_cache_salt(f, client, model, label):
    """cache_salt (vLLM's): a prompt cached under one salt is restored only
    for that salt; another salt and the shared cache compute it again
    (usage.prompt_tokens_details.cached_tokens)."""
    prompt = f"The salted prompt of {label} {time.time_ns()}: " + "count the stars " * 12

    def cached(salt):
        extra = {"cache_salt": salt} if salt is not None else {}
        r = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0,
                                      extra_body=extra)
        return r.usage.prompt_tokens_details.cached_tokens, r.usage.prompt_tokens

    first, n = cached("tenant-a")
    other, _ = cached("tenant-b")
    shared, _ = cached(None)
    again, _ = cached("tenant-a")
    f.check(first == 0 and other == 0 and shared == 0 and again >= 32,
            f"{label}: cache_salt: {n} prompt tokens; tenant-a {first}, tenant-b {other}, "
            f"no salt {shared}, tenant-a again {again} from the prefix cache")


def check_client_templated_prompt(args, f, client, model, host, label):
    """A prompt the client templated itself (the chat template's text, its
    special tokens written out) reads its special-token text as the special
    tokens, as llama.cpp's server and vLLM do: /tokenize gives the chat
    request's ids, llama.cpp tokenizes the text to the same ids (special
    true), and greedy /v1/completions of the text answers as the chat
    request does. "parse_special": false reads the text as text."""
    msgs = [{"role": "user", "content": "Name a colour."}]
    st, _, body = raw(host, "POST", "/tokenize", body={"messages": msgs})
    chat_ids = json.loads(body)["tokens"]
    st2, _, body2 = raw(host, "POST", "/detokenize", body={"tokens": chat_ids})
    text = json.loads(body2)["content"]
    f.check(st == 200 and st2 == 200 and "<|im_start|>" in text,
            f"{label}: the chat prompt's text carries its special tokens ({text[:40]!r}...)")
    st, _, body = raw(host, "POST", "/tokenize", body={"content": text})
    ids = json.loads(body)["tokens"]
    f.check(ids == chat_ids, f"{label}: /tokenize of the templated text == the chat ids "
                             f"({len(ids)} and {len(chat_ids)} tokens)")
    st, _, body = raw(host, "POST", "/tokenize", body={"content": text, "parse_special": False})
    f.check(len(json.loads(body)["tokens"]) > len(chat_ids),
            f"{label}: parse_special false reads special-token text as text")
    try:
        from llama_cpp import Llama
        llm = Llama(model_path=args.model, n_ctx=256, vocab_only=True, verbose=False)
        f.check(llm.tokenize(text.encode(), add_bos=True, special=True) == ids,
                f"{label}: llama.cpp tokenizes the templated text (special true) to the same ids")
        del llm
    except ImportError:
        print(f"NOT CHECKED {label}: templated text against llama.cpp (llama_cpp absent)")
    want = client.chat.completions.create(model=model, messages=msgs, max_tokens=10,
                                          temperature=0)
    got = client.completions.create(model=model, prompt=text, max_tokens=10, temperature=0)
    f.check(got.usage.prompt_tokens == len(chat_ids) and
            got.choices[0].text == want.choices[0].message.content,
            f"{label}: greedy completion of the templated text == the chat answer "
            f"({got.choices[0].text!r}, {want.choices[0].message.content!r})")


def check_prompt_logprobs(args, f, client, model, host, grpc_address, stubs, label):
    """A scored prompt: gRPC prompt_logprobs give each prompt token after
    the first the log-probability that decoding it after its prefix gives
    (the token forced with logit_bias +100: logprobs are of the raw
    logits), to the bit, with the same top tokens; they are llama.cpp's
    log-softmax at that position within Q4_1's noise (and far from the next
    position's: an off-by-one shows); /v1/completions with echo puts the
    prompt's text and, with logprobs, its tokens (the first with null)
    before the completion's, streamed or not."""
    pb, pb_grpc, grpc = stubs
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(grpc_address))
    text = ("The history of the Roman Empire spans more than a thousand years, from the "
            "founding of the city to the fall of Constantinople in 1453. Its roads, laws and "
            "languages still shape Europe, and historians still argue about its decline.")
    done = None
    for r in stub.Generate(pb.GenerateRequest(prompt=text, max_tokens=1, prompt_logprobs=2),
                           timeout=300):
        if r.HasField("done"):
            done = r.done
    ids = list(done.prompt_ids)
    scored = list(done.prompt_logprobs)
    f.check(len(ids) > 40 and len(scored) == len(ids) - 1 and
            [c.id for c in scored] == ids[1:] and all(len(c.top) == 2 for c in scored),
            f"{label}: prompt_logprobs: {len(scored)} for {len(ids)} prompt tokens, each its token")
    differ = []
    for k in range(1, len(ids)):
        req = pb.GenerateRequest(max_tokens=1, logprobs=True, top_logprobs=2)
        req.prompt_ids.ids.extend(ids[:k])
        req.sampling.logit_bias_ids.append(ids[k])
        req.sampling.logit_bias_values.append(100.0)
        got = None
        for r in stub.Generate(req, timeout=300):
            if r.HasField("delta") and r.delta.choices:
                got = r.delta.choices[0]
        c = scored[k - 1]
        if (got is None or got.id != ids[k] or got.logprob != c.logprob or
                [(t.id, t.logprob) for t in got.top] != [(t.id, t.logprob) for t in c.top]):
            differ.append(k)
    f.check(not differ, f"{label}: prompt_logprobs == decoding each token after its prefix, "
                        f"to the bit (positions that differ: {differ})")
    try:
        import numpy as np
        from llama_cpp import Llama
        llm = Llama(model_path=args.model, n_ctx=256, logits_all=True, verbose=False)
        llm.eval(ids)
        sc = np.array(llm.scores[:len(ids)], dtype=np.float64)
        del llm
        m = sc.max(axis=1, keepdims=True)
        ls = sc - (m + np.log(np.exp(sc - m).sum(axis=1, keepdims=True)))
        ours = np.array([c.logprob for c in scored])
        ref = np.array([ls[i, ids[i + 1]] for i in range(len(ids) - 1)])
        shifted = np.array([ls[i + 1, ids[i + 1]] for i in range(len(ids) - 2)])
        err, off = float(np.abs(ours - ref).mean()), float(np.abs(ours[:-1] - shifted).mean())
        f.check(err < 0.15 and off > 1.0,
                f"{label}: prompt_logprobs against llama.cpp's: mean |diff| {err:.3f} "
                f"(one position off: {off:.2f})")
    except ImportError:
        print(f"NOT CHECKED {label}: prompt_logprobs against llama.cpp (llama_cpp absent)")

    whole = client.completions.create(model=model, prompt=text, max_tokens=4, temperature=0,
                                      echo=True, logprobs=2)
    ch = whole.choices[0]
    lp = ch.logprobs
    f.check(ch.text.startswith(text) and len(lp.tokens) == len(ids) + 4 and
            lp.token_logprobs[0] is None and lp.top_logprobs[0] is None and
            all(abs(lp.token_logprobs[i + 1] - scored[i].logprob) < 1e-5
                for i in range(len(scored))) and
            lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0 and
            whole.usage.prompt_tokens == len(ids) and whole.usage.completion_tokens == 4,
            f"{label}: echo with logprobs: the prompt's text and tokens first "
            f"({len(lp.tokens)} tokens, {ch.text[len(text):]!r} after the prompt)")
    streamed, first = "", None
    for chunk in client.completions.create(model=model, prompt=text, max_tokens=4,
                                           temperature=0, echo=True, stream=True):
        if chunk.choices:
            first = chunk.choices[0].text if first is None else first
            streamed += chunk.choices[0].text
    plain = client.completions.create(model=model, prompt=text, max_tokens=4, temperature=0,
                                      echo=True)
    # n > 1: the prompt is scored once and every choice shows those scores.
    many = client.completions.create(model=model, prompt=text, max_tokens=3, temperature=1.0,
                                     seed=4, n=3, echo=True, logprobs=1)
    heads = [c.logprobs.token_logprobs[:len(ids)] for c in many.choices]
    f.check(len(many.choices) == 3 and all(h == heads[0] for h in heads) and
            all(c.text.startswith(text) for c in many.choices) and
            all(abs(heads[0][i + 1] - scored[i].logprob) < 1e-5 for i in range(len(scored))),
            f"{label}: echo with logprobs and n=3: every choice shows the prompt's scores")
    f.check(first == text and streamed == ch.text == plain.choices[0].text and
            plain.choices[0].logprobs is None,
            f"{label}: echo streamed: the prompt first, the same text ({streamed[-30:]!r})")


def check_logit_bias(args, f, client, model, host, grpc_address, stubs, label):
    """logit_bias against llama.cpp (llama-cpp-python on the same GGUF):
    greedy ids with a bias are, at every step, the argmax of llama.cpp's
    logits plus the bias (teacher-forced on our ids; two logits within 0.5
    are a tie, as in tests/engine's agreement test), the banned tokens never
    appear, and the ids differ from the unbiased ones; the SDK's text is
    the gRPC ids' text; sampling with +100 on one token gives only that
    token, and a bias banning all but two tokens (an object of n_vocab - 2
    entries) samples only those two."""
    try:
        import numpy as np
        from llama_cpp import Llama
    except ImportError:
        print(f"NOT CHECKED {label}: logit_bias against llama.cpp (llama_cpp or numpy absent)")
        return
    pb, pb_grpc, grpc = stubs
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(grpc_address))

    def post(path, body):
        st, _, out = raw(host, "POST", path, body=body)
        assert st == 200, f"{path}: {st} {out!r}"
        return json.loads(out)

    prompt_text = "The capital of France is"
    prompt = post("/tokenize", {"content": prompt_text})["tokens"]

    def generate(bias, n, temperature=0.0, seed=None):
        req = pb.GenerateRequest(max_tokens=n, ignore_eos=True)
        req.prompt_ids.ids.extend(prompt)
        req.sampling.temperature = temperature
        if seed is not None:
            req.sampling.seed = seed
        req.sampling.logit_bias_ids.extend(bias.keys())
        req.sampling.logit_bias_values.extend(bias.values())
        ids = []
        for r in stub.Generate(req, timeout=300):
            if r.HasField("delta"):
                ids.extend(r.delta.ids)
        return ids

    plain = generate({}, 12)
    bias = {plain[0]: -100.0, plain[1]: -100.0, plain[2]: -3.0}
    biased = generate(bias, 12)
    f.check(biased != plain and not {plain[0], plain[1]} & set(biased),
            f"{label}: logit_bias bans {plain[:2]} and changes the ids ({plain} -> {biased})")
    llm = Llama(model_path=args.model, n_ctx=256, logits_all=True, verbose=False)
    n_vocab = llm.n_vocab()
    f.check(llm.tokenize(prompt_text.encode(), add_bos=True, special=False) == prompt,
            f"{label}: llama.cpp tokenizes the prompt as /tokenize does")
    llm.eval(prompt + biased)
    scores = np.array(llm.scores[len(prompt) - 1:len(prompt) - 1 + len(biased)],
                      dtype=np.float32)
    del llm
    for k, v in bias.items():
        scores[:, k] += v
    ties, wrong = [], []
    for step, tok in enumerate(biased):
        want = int(np.argmax(scores[step]))
        if tok != want:
            margin = float(scores[step][want] - scores[step][tok])
            (ties if margin < 0.5 else wrong).append((step, tok, want, round(margin, 3)))
    f.check(len(biased) == 12 and not wrong,
            f"{label}: biased greedy ids are llama.cpp's logits + bias, argmax, at every step "
            f"((step, ours, llama.cpp's, margin): ties {ties}, wrong {wrong})")

    text = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0,
                                      logit_bias={str(k): v for k, v in bias.items()},
                                      extra_body={"ignore_eos": True}).choices[0].text
    f.check(text == post("/detokenize", {"tokens": biased})["content"],
            f"{label}: SDK completion with logit_bias == the gRPC ids' text ({text!r})")
    forced = generate({plain[3]: 100.0}, 6, temperature=1.0, seed=5)
    f.check(forced == [plain[3]] * 6,
            f"{label}: +100 forces token {plain[3]} when sampling ({forced})")
    two = sorted({plain[4], plain[5] if plain[5] != plain[4] else plain[4] + 1})
    ban = {str(i): -100 for i in range(n_vocab) if i not in two}
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=8, temperature=1.5, seed=9, logit_bias=ban,
                                       logprobs=True)
    got = [t.token for t in r.choices[0].logprobs.content]
    pieces = {post("/detokenize", {"tokens": [i]})["content"] for i in two}
    f.check(len(got) == r.usage.completion_tokens > 0 and set(got) <= pieces,
            f"{label}: logit_bias banning all but {two} ({len(ban)} entries) samples only "
            f"those ({got})")


def check_cors_flag(args, f):
    """`strata serve --cors-allow-origin` takes "*", "off" or one origin; any
    other value stops it before the model loads (exit 2, the value named)."""
    for value in ("https://a/b", "a.example", "https://"):
        p = subprocess.run([args.strata, "serve", args.model, "--cors-allow-origin", value,
                            "--listen", "127.0.0.1:0", "--http", "off"],
                           capture_output=True, text=True, timeout=60)
        said = [x for x in p.stderr.splitlines() if "cors_allow_origin" in x]
        f.check(p.returncode == 2 and said and value in said[0],
                f"serve --cors-allow-origin {value!r}: exit {p.returncode}, {said[:1]}")


def check_auth(args, f, workdir, stubs):
    import openai
    pb, pb_grpc, grpc = stubs
    env = dict(os.environ, STRATA_API_KEY="s3cret-key")
    serve = start_serve(args, workdir, name="serve-key", env=env)
    try:
        host = serve.http
        bad = openai.OpenAI(base_url=f"http://{host}/v1", api_key="wrong", max_retries=0)
        try:
            bad.models.list()
            f.check(False, "auth: a wrong key is refused")
        except openai.AuthenticationError as e:
            f.check(e.status_code == 401, "auth: a wrong key -> 401")
        st, _ = error_of(raw(host, "POST", "/v1/completions", body={"prompt": "x"}))
        f.check(st == 401, "auth: no key -> 401")
        good = openai.OpenAI(base_url=f"http://{host}/v1", api_key="s3cret-key", max_retries=0)
        r = good.completions.create(model=good.models.list().data[0].id, prompt="Hi",
                                    max_tokens=2, temperature=0)
        f.check(r.usage.completion_tokens == 2, "auth: the right key is served")
        # The scheme in any case (RFC 9110 11.1); /infill is guarded too.
        st, _, _ = raw(host, "POST", "/tokenize", body={"content": "hi"},
                       headers={"Authorization": "bearer s3cret-key"})
        f.check(st == 200, "auth: `bearer KEY` (lower case) is served")
        st, _ = error_of(raw(host, "POST", "/infill", body={"input_prefix": "", "input_suffix": ""}))
        f.check(st == 401, "auth: /infill without the key -> 401")
        st, _ = error_of(raw(host, "POST", "/completion", body={"prompt": "hi", "n_predict": 1}))
        f.check(st == 401, "auth: /completion without the key -> 401")
        st, _, _ = raw(host, "GET", "/health")
        f.check(st == 200, "auth: /health stays open")
        stub = pb_grpc.InferenceStub(grpc.insecure_channel(serve.address))
        try:
            stub.ListModels(pb.ListModelsRequest(), timeout=5)
            f.check(False, "auth: gRPC without the key is refused")
        except grpc.RpcError as e:
            f.check(e.code() == grpc.StatusCode.UNAUTHENTICATED, "auth: gRPC without the key")
        m = stub.ListModels(pb.ListModelsRequest(), timeout=5,
                            metadata=[("authorization", "Bearer s3cret-key")])
        f.check(len(m.models) == 1, "auth: gRPC with the key")
    finally:
        serve.kill()


def run_setup(args, workdir, stubs, f, check, serve_extra=(), cluster_config=""):
    """Starts `strata serve` or a coordinator with 2 workers (args.setup),
    waits until the cluster serves, and calls check(procs, http_host,
    grpc_address, label); prints the children's logs when something failed
    and kills them. Returns the exit status (0 passed, 1 failed)."""
    procs = []
    try:
        if args.setup == "serve":
            procs = [start_serve(args, workdir, extra=serve_extra)]
        else:
            coordinator, workers = start_cluster(args, workdir, extra_config=cluster_config)
            procs = workers + [coordinator]
            pb, pb_grpc, grpc = stubs
            stub = pb_grpc.InferenceStub(grpc.insecure_channel(coordinator.address))
            end = time.time() + 120
            while (stub.Health(pb.HealthRequest(), timeout=5).state != pb.HealthResponse.SERVING
                   and time.time() < end):
                time.sleep(0.1)
        front = procs[-1]
        check(procs, front.http, front.address, args.setup)
    except Exception:
        for p in procs:
            print(f"--- {p.name} ---\n{p.tail()}")
        raise
    finally:
        for p in procs:
            p.kill()
    if f.n:
        for p in procs:
            print(f"--- {p.name} ---\n{p.tail()}")
    print(f"{f.passed} passed, {f.n} failed")
    return 1 if f.n else 0


def parse_args_or_skip():
    """The HTTP tests' command line; exits 77 (skip, saying why) when the
    model or the openai SDK is absent."""
    ap = argparse.ArgumentParser()
    for a in ("--strata", "--worker", "--coordinator", "--model", "--proto-dir"):
        ap.add_argument(a, required=True)
    ap.add_argument("--setup", choices=["serve", "cluster"], required=True)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        skip(f"{args.model} absent (scripts/fetch-models.sh)")
    try:
        import openai  # noqa: F401
    except ImportError:
        skip("the openai package is absent (scripts/install-test-tools.sh installs it)")
    return args


def main():
    args = parse_args_or_skip()
    with tempfile.TemporaryDirectory(prefix="strata-http-") as workdir:
        stubs = load_stubs(args.proto_dir, workdir)
        f = Failures()

        def check(procs, host, grpc_address, label):
            check_api(args, f, host, grpc_address, stubs, label)
            if label == "serve":
                check_auth(args, f, workdir, stubs)
                check_cors_flag(args, f)
                return
            procs[1].kill()  # the second worker
            end = time.time() + 20
            st = 200
            while time.time() < end and st == 200:
                st, _, _ = raw(host, "GET", "/health")
                time.sleep(0.05)
            f.check(st == 503, "cluster: /health 503 once a worker is gone")

        return run_setup(args, workdir, stubs, f, check)


if __name__ == "__main__":
    sys.exit(main())
