#!/usr/bin/env python3
"""Structured output end to end: `strata serve` (or a coordinator with two
`strata-worker`s) answers strata.v1.Inference Generate requests that carry
json_schema, json_object or a GBNF grammar; every output parses and
validates (Python `jsonschema` when installed, else json plus checks of our
own), at temperature 1.5 over many seeds; greedy output without a grammar is
the same as `strata run`'s; bad requests get INVALID_ARGUMENT naming the
field.

Scenarios (--scenario): serve (strata serve --workers 1), cluster (a
coordinator and 2 workers). Exit status: 0 passed, 1 failed, 77 skipped.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
import cluster_test as ct  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6},
                 "maxItems": 3},
        "ok": {"type": "boolean"},
        "extra": {"anyOf": [{"type": "null"}, {"type": "number"}]},
        "pt": {"$ref": "#/$defs/point"},
    },
    "required": ["name", "age", "color", "tags", "ok"],
    "additionalProperties": False,
    "$defs": {"point": {"type": "object",
                        "properties": {"x": {"type": "integer"},
                                       "y": {"type": ["integer", "null"]}},
                        "required": ["x", "y"]}},
}

# Bounded: every JSON object it allows is short (so a random model ends).
SMALL_OBJECT_GBNF = r'''
root ::= "{" ws pair ("," ws pair){0,2} "}"
pair ::= "\"" [a-z]{1,5} "\"" ws ":" ws ("true" | "false" | "null" | [0-9]{1,3}) ws
ws ::= " "?
'''
LIST_GBNF = r'''
root ::= item ("," item){0,3}
item ::= [a-c] [0-9]
'''


def own_checks(v):
    """The schema checked another way (when jsonschema is absent)."""
    assert isinstance(v, dict)
    assert set(v) <= set(SCHEMA["properties"])
    for k in SCHEMA["required"]:
        assert k in v, k
    assert isinstance(v["name"], str) and len(v["name"]) <= 12
    assert isinstance(v["age"], int) and not isinstance(v["age"], bool)
    assert v["color"] in ("red", "green", "blue")
    assert isinstance(v["tags"], list) and len(v["tags"]) <= 3
    assert all(isinstance(t, str) and len(t) <= 6 for t in v["tags"])
    assert isinstance(v["ok"], bool)
    if "extra" in v:
        assert v["extra"] is None or isinstance(v["extra"], (int, float))
    if "pt" in v:
        assert set(v["pt"]) == {"x", "y"} and isinstance(v["pt"]["x"], int)


def validator():
    try:
        import jsonschema
    except ImportError:
        print("note: jsonschema is not installed; checking with own_checks()")
        return own_checks
    return lambda v: jsonschema.validate(v, SCHEMA)


def generate(api, seed, temperature=1.5, max_tokens=400, **fields):
    pb = api.pb
    req = pb.GenerateRequest(prompt="A JSON record of a person:", max_tokens=max_tokens,
                             sampling=pb.SamplingParams(temperature=temperature, seed=seed),
                             **fields)
    ids, text, done = [], "", None
    try:
        for r in api.stub.Generate(req, timeout=900):
            if r.HasField("delta"):
                ids.extend(r.delta.ids)
                text += r.delta.text
            else:
                done = r.done
        return ids, done, None
    except api.grpc.RpcError as e:
        return ids, done, (e.code(), e.details())


def in_parallel(fn, items, width=8):
    out = [None] * len(items)
    for start in range(0, len(items), width):
        threads = []
        for i in range(start, min(start + width, len(items))):
            def run(i=i):
                out[i] = fn(items[i])
            t = threading.Thread(target=run)
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
    return out


def check_structured(args, api, f, seeds):
    validate = validator()
    schema_text = json.dumps(SCHEMA)
    results = in_parallel(lambda s: generate(api, s, json_schema=schema_text), seeds)
    bad = []
    for seed, (ids, done, err) in zip(seeds, results):
        try:
            assert err is None, err
            assert done.finish_reason == "stop", f"finish {done.finish_reason}"
            validate(json.loads(done.text))
        except Exception as e:  # noqa: BLE001
            bad.append(f"seed {seed}: {e!r}: {done.text if done else ''!r}")
    f.check(not bad, f"json_schema at T=1.5: {len(seeds)} seeds parse and validate"
            + ("" if not bad else "\n  " + "\n  ".join(bad[:5])))
    if results and results[0][1] is not None:
        print(f"  e.g. {results[0][1].text!r}")

    results = in_parallel(lambda s: generate(api, s, grammar=SMALL_OBJECT_GBNF, max_tokens=200),
                          seeds[:8])
    pat = re.compile(r'\{ ?"[a-z]{1,5}" ?: ?(true|false|null|[0-9]{1,3}) ?'
                     r'(, ?"[a-z]{1,5}" ?: ?(true|false|null|[0-9]{1,3}) ?){0,2}\}')
    bad = [f"{r[2] or r[1].text!r}" for r in results
           if r[2] is not None or not pat.fullmatch(r[1].text) or r[1].finish_reason != "stop"]
    f.check(not bad, "GBNF grammar at T=1.5: every output matches the language (a regex)"
            + ("" if not bad else ": " + "; ".join(bad[:3])))

    results = in_parallel(lambda s: generate(api, s, grammar=LIST_GBNF, max_tokens=50), seeds[:8])
    bad = [f"{r[2] or r[1].text!r}" for r in results
           if r[2] is not None or not re.fullmatch(r"[a-c][0-9](,[a-c][0-9]){0,3}", r[1].text)]
    f.check(not bad, "GBNF list grammar: outputs match" + ("" if not bad else ": " + "; ".join(bad[:3])))

    # json_object: any object; a random model may write long strings, so
    # only a finished output is held to parsing.
    results = in_parallel(lambda s: generate(api, s, json_object=True, max_tokens=300), seeds[:4])
    bad = []
    for ids, done, err in results:
        if err is not None:
            bad.append(repr(err))
        elif done.finish_reason == "stop":
            try:
                if not isinstance(json.loads(done.text), dict):
                    bad.append(done.text)
            except ValueError as e:
                bad.append(f"{e}: {done.text!r}")
        elif not done.text.startswith("{"):
            bad.append(done.text)
    f.check(not bad, "json_object: finished outputs are JSON objects" + ("" if not bad else ": " + "; ".join(bad[:3])))


def check_errors(api, f):
    code = api.grpc.StatusCode.INVALID_ARGUMENT
    _, _, err = generate(api, 1, grammar='root ::= "a" |\nx ::= (')
    f.check(err is not None and err[0] == code and err[1].startswith("grammar: line 2 col"),
            f"a bad grammar: INVALID_ARGUMENT naming grammar and the line ({err})")
    _, _, err = generate(api, 1, grammar='root ::= "a"', json_object=True)
    f.check(err is not None and err[0] == code and "at most one" in err[1],
            f"grammar and json_object: INVALID_ARGUMENT ({err})")
    _, _, err = generate(api, 1, json_schema='{"type":"string","pattern":"a+"}')
    f.check(err is not None and err[0] == code and "json_schema" in err[1] and "pattern" in err[1],
            f"an unsupported keyword: INVALID_ARGUMENT naming it ({err})")
    _, _, err = generate(api, 1, json_schema='{"type":')
    f.check(err is not None and err[0] == code and err[1].startswith("json_schema"),
            f"a schema that is not JSON: INVALID_ARGUMENT ({err})")
    # The server is still up and serving.
    _, done, err = generate(api, 3, grammar=LIST_GBNF, max_tokens=50)
    f.check(err is None and done is not None, "served after the bad requests")


def greedy_ids(api, prompt, n):
    req = api.pb.GenerateRequest(prompt=prompt, max_tokens=n, ignore_eos=True)
    ids = []
    for r in api.stub.Generate(req, timeout=600):
        if r.HasField("delta"):
            ids.extend(r.delta.ids)
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--coordinator", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--scenario", required=True, choices=["serve", "cluster"])
    ap.add_argument("--seeds", type=int, default=24)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        ct.skip(f"{args.model} absent (scripts/fetch-models.sh, scripts/make-test-models.sh)")
    with tempfile.TemporaryDirectory(prefix="strata-grammar-") as workdir:
        pb, pb_grpc, grpc = ct.load_stubs(args.proto_dir, workdir)
        f = ct.Failures()
        if args.scenario == "serve":
            c = ct.Serve(args, workdir, 1, ctx=1024, max_sequences=8)
        else:
            c = ct.Cluster(args, workdir, 2, ctx=1024, max_sequences=8)
        try:
            api = ct.Api(c.address, pb, pb_grpc, grpc)
            api.wait_state(pb.HealthResponse.SERVING, 300)
            if args.scenario == "serve":
                prompt = "The capital of France is"
                want = ct.reference_ids(args, prompt, 12)
                got = greedy_ids(api, prompt, 12)
                f.check(got == want, f"greedy without a grammar: the ids of strata run ({got} vs {want})")
                check_errors(api, f)
            check_structured(args, api, f, list(range(1, args.seeds + 1)))
        finally:
            if f.n:
                print(c.logs())
            c.close()
        print(f"{f.passed} passed, {f.n} failed")
        return 1 if f.n else 0


if __name__ == "__main__":
    sys.exit(main())
