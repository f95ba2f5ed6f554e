#!/usr/bin/env python3
"""Tool calls end to end: the official `openai` SDK against `strata serve`
(--setup serve) or a strata-coordinator with 2 strata-worker processes
(--setup cluster), SmolLM2 (a ChatML model) with its chat template
overridden by Qwen 2.5's (--chat-template / `chat_template:`), which teaches
Hermes <tool_call> calls.

Checked: tool_choice "required" and a named function give a call whose name
is one of the tools and whose arguments parse as a JSON object, with
finish_reason "tool_calls" and content null; streamed deltas (OpenAI's
index/id/type/function shape) agree with the non-streamed answer (greedy);
a follow-up turn with the assistant's tool_calls and a `tool` message
renders and generates; tool_choice with response_format -> 400 naming
tool_choice; gRPC GenerateDone.tool_calls_json and finish_reason
"tool_calls" (serve); a missing --chat-template file fails at startup with
a clear message (serve).

Exit status: 0 passed, 1 failed, 77 skipped (model, SDK or grpcio absent).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from cluster_test import Failures, load_stubs, skip  # noqa: E402
from http_test import parse_args_or_skip, raw, run_setup  # noqa: E402

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "jinja", "data",
                        "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}},
                       "required": ["timezone"]}}},
]
NAMES = {t["function"]["name"] for t in TOOLS}
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]
MAX_TOKENS = 96


def streamed_call(client, model, **kw):
    """A streamed chat: (content, {index: {id, name, arguments}}, finish_reason)."""
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(model=model, stream=True, **kw):
        for c in chunk.choices:
            content += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                e = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                e["id"] = d.id or e["id"]
                if d.function is not None:
                    e["name"] += d.function.name or ""
                    e["arguments"] += d.function.arguments or ""
                if d.type is not None and d.type != "function":
                    e["bad_type"] = d.type
            finish = c.finish_reason or finish
    return content, calls, finish


def args_object(text):
    try:
        v = json.loads(text)
        return v if isinstance(v, dict) else None
    except ValueError:
        return None


def check_tools(f, host, label, full=True):
    import openai
    client = openai.OpenAI(base_url=f"http://{host}/v1", api_key="unused", max_retries=0,
                           timeout=300)
    model = client.models.list().data[0].id
    # One call (parallel_tool_calls false): SmolLM2 would go on writing calls.
    kw = dict(messages=MSGS, tools=TOOLS, tool_choice="required", max_tokens=MAX_TOKENS,
              temperature=0, parallel_tool_calls=False)
    whole = client.chat.completions.create(model=model, **kw)
    msg = whole.choices[0].message
    calls = msg.tool_calls or []
    f.check(len(calls) >= 1 and all(c.function.name in NAMES and c.type == "function" and
                                     args_object(c.function.arguments) is not None and
                                     c.id for c in calls),
            f"{label}: tool_choice required -> calls {[(c.function.name, c.function.arguments) for c in calls]}")
    f.check(whole.choices[0].finish_reason == "tool_calls" and msg.content is None,
            f"{label}: finish_reason {whole.choices[0].finish_reason}, content {msg.content!r}")
    if not calls:
        return []

    if full:
        content, scalls, finish = streamed_call(client, model, **kw)
        same = (len(scalls) == len(calls) and all(
            scalls[i]["name"] == c.function.name and scalls[i]["arguments"] == c.function.arguments
            and scalls[i]["id"] and "bad_type" not in scalls[i] for i, c in enumerate(calls)))
        f.check(same and content == "" and finish == whole.choices[0].finish_reason,
                f"{label}: streamed calls == non-streamed ({scalls}, {content!r}, {finish})")

    # A named function.
    named = client.chat.completions.create(
        model=model, messages=MSGS, tools=TOOLS, max_tokens=MAX_TOKENS, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    ncalls = named.choices[0].message.tool_calls or []
    f.check(len(ncalls) == 1 and ncalls[0].function.name == "get_time" and
            args_object(ncalls[0].function.arguments) is not None and
            named.choices[0].finish_reason == "tool_calls",
            f"{label}: named tool_choice -> get_time "
            f"{[(c.function.name, c.function.arguments) for c in ncalls]}")
    if full:
        _, nscalls, nfinish = streamed_call(
            client, model, messages=MSGS, tools=TOOLS, max_tokens=MAX_TOKENS, temperature=0,
            tool_choice={"type": "function", "function": {"name": "get_time"}})
        f.check(len(nscalls) == 1 and nscalls[0]["name"] == "get_time" and
                nscalls[0]["arguments"] == (ncalls[0].function.arguments if ncalls else None) and
                nfinish == "tool_calls", f"{label}: named tool_choice streamed agrees")

    # The follow-up turn: the assistant's calls (arguments as JSON text, as
    # the SDK sends them back) and a tool result.
    follow = MSGS + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": c.id, "type": "function",
             "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls]},
    ] + [{"role": "tool", "tool_call_id": c.id, "content": "18 degrees, sunny"} for c in calls]
    after = client.chat.completions.create(model=model, messages=follow, tools=TOOLS,
                                           max_tokens=24, temperature=0)
    f.check(after.choices[0].finish_reason in ("stop", "length", "tool_calls") and
            after.usage.completion_tokens > 0 and
            after.usage.prompt_tokens > whole.usage.prompt_tokens,
            f"{label}: follow-up with tool_calls and a tool message generates "
            f"({after.choices[0].message.content!r}, {after.choices[0].finish_reason})")
    # The prompt of that turn shows the arguments rendered as an object.
    st, _, body = raw(host, "POST", "/tokenize", body={"messages": follow, "tools": TOOLS})
    ids = json.loads(body).get("tokens", []) if st == 200 else []
    st2, _, text = raw(host, "POST", "/detokenize", body={"tokens": ids})
    rendered = json.loads(text).get("content", "") if st2 == 200 else ""
    want = '{"name": "%s", "arguments": %s}' % (
        calls[0].function.name, json.dumps(json.loads(calls[0].function.arguments)))
    f.check(want in rendered and "<tool_response>\n18 degrees, sunny" in rendered,
            f"{label}: the follow-up renders the call with object arguments ({want!r})")

    if full:
        try:
            client.chat.completions.create(model=model, messages=MSGS, tools=TOOLS,
                                           tool_choice="required", max_tokens=8,
                                           response_format={"type": "json_object"})
            f.check(False, f"{label}: tool_choice with response_format refused")
        except openai.BadRequestError as e:
            f.check(e.status_code == 400 and e.body.get("param") == "tool_choice",
                    f"{label}: tool_choice + response_format -> 400 tool_choice")
        # tool_choice "none": tools rendered, nothing parsed.
        none = client.chat.completions.create(model=model, messages=MSGS, tools=TOOLS,
                                              tool_choice="none", max_tokens=16, temperature=0)
        f.check(none.choices[0].message.tool_calls is None and
                none.choices[0].finish_reason in ("stop", "length"),
                f"{label}: tool_choice none -> text ({none.choices[0].message.content!r})")
    return [(c.function.name, c.function.arguments) for c in calls]


def check_grpc(f, address, stubs, label, http_calls):
    pb, pb_grpc, grpc = stubs
    stub = pb_grpc.InferenceStub(grpc.insecure_channel(address))
    req = pb.GenerateRequest(max_tokens=MAX_TOKENS, tools_json=json.dumps(TOOLS),
                             tool_choice="required", parallel_tool_calls=False)
    req.sampling.temperature = 0
    for m in MSGS:
        req.messages.messages.add(role=m["role"], content=m["content"])
    done, text = None, ""
    for r in stub.Generate(req, timeout=300):
        if r.HasField("done"):
            done = r.done
        else:
            text += r.delta.text
    calls = json.loads(done.tool_calls_json) if done and done.tool_calls_json else []
    f.check(done is not None and done.finish_reason == "tool_calls" and len(calls) >= 1 and
            all(c["function"]["name"] in NAMES and args_object(c["function"]["arguments"])
                is not None for c in calls) and text == "" and done.text == "",
            f"{label}: gRPC tool_calls_json {done.tool_calls_json if done else None!r}, "
            f"finish {done.finish_reason if done else None}, text {text!r}")
    f.check([(c["function"]["name"], c["function"]["arguments"]) for c in calls] == http_calls,
            f"{label}: gRPC calls == HTTP calls (greedy)")


def main():
    args = parse_args_or_skip()
    with tempfile.TemporaryDirectory(prefix="strata-tools-") as workdir:
        stubs = load_stubs(args.proto_dir, workdir)
        f = Failures()
        if args.setup == "serve":
            missing = os.path.join(workdir, "missing.jinja")
            p = subprocess.run([args.strata, "serve", args.model, "--chat-template", missing,
                                "--http", "off"], capture_output=True, text=True, timeout=120)
            f.check(p.returncode != 0 and "chat_template" in p.stderr and missing in p.stderr,
                    f"serve: missing --chat-template -> startup error ({p.stderr.strip()[-200:]!r})")

        def check(procs, host, grpc_address, label):
            if label == "serve":
                http_calls = check_tools(f, host, label)
                check_grpc(f, grpc_address, stubs, label, http_calls)
            else:
                check_tools(f, host, label, full=False)

        return run_setup(args, workdir, stubs, f, check, serve_extra=("--chat-template", TEMPLATE),
                         cluster_config=f"chat_template: {TEMPLATE}\n")


if __name__ == "__main__":
    sys.exit(main())
