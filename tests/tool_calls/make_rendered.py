#!/usr/bin/env python3
"""Writes data/rendered.json: assistant tool-call turns as the chat templates
themselves write them, for tool_calls_test.cc.

Usage: make_rendered.py [TEMPLATES_DIR]   (default ../shared/conformance/chat-templates)

For each template and case, the conversation [system?, user, assistant with
tool_calls] is rendered by Python jinja2 (the Hugging Face environment:
trim_blocks, lstrip_blocks, tojson without key sorting or ASCII escaping,
raise_exception, strftime_now) without a generation prompt, and the prompt
[system?, user] with one; the text after their common prefix is what a model
of that family writes for the turn. Each record holds the template file, the
format the C++ detector must name, that text, and the calls and content the
parser must find. A case the template refuses (raise_exception) is left out.
The text keeps the end-of-turn token the template writes (the parser drops it).
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = (sys.argv[1] if len(sys.argv) > 1 else
             os.path.join(HERE, "..", "..", "..", "shared", "conformance", "chat-templates"))

# template file -> (format name, bos, eos)
FAMILIES = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama3_json", "<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama3_json", "<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3_json", "<|begin_of_text|>", "<|eot_id|>"),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": ("hermes", "<|begin_of_text|>", "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("hermes", "<|begin_of_text|>", "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("hermes", "", "<|im_end|>"),
    "Qwen-QwQ-32B.jinja": ("hermes", "", "<|im_end|>"),
    "Qwen-Qwen3-0.6B.jinja": ("hermes", "", "<|im_end|>"),
    "Qwen3-Coder.jinja": ("qwen3_coder", "", "<|im_end|>"),
    "Qwen3.5-4B.jinja": ("qwen3_coder", "", "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral", "<s>", "</s>"),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("mistral", "<s>", "</s>"),
    "unsloth-mistral-Devstral-Small-2507.jinja": ("mistral", "<s>", "</s>"),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("mistral", "<s>", "</s>"),
    "openai-gpt-oss-120b.jinja": ("harmony", "<|startoftext|>", "<|return|>"),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "llama-cpp-deepseek-r1.jinja": ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "ibm-granite-granite-4.0.jinja": ("hermes", "<|start_of_role|>", "<|end_of_text|>"),
    "Bielik-11B-v3.0-Instruct.jinja": ("hermes", "<s>", "<|im_end|>"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": ("qwen3_coder", "<s>", "<|im_end|>"),
    "GLM-4.7-Flash.jinja": ("glm", "[gMASK]<sop>", "<|endoftext|>"),
    "Spark2.5.jinja": ("glm", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "meetkai-functionary-medium-v3.1.jinja": ("llama3_json", "<|begin_of_text|>", "<|eot_id|>"),
    "moonshotai-Kimi-K2.jinja": ("kimi_k2", "", "<|im_end|>"),
    "MiniMax-M1.jinja": ("minimax", "", "<end_of_sentence>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": ("command_r", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"}}, "required": ["query"]}}},
]


def call(name, args, id_="call00001"):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


CASES = [
    ("single", None, [call("get_weather", {"location": "Paris", "unit": "celsius"}, "abcDEF123")]),
    ("two_calls", None, [call("get_weather", {"location": "Paris"}, "abcDEF123"),
                         call("search", {"query": "Louvre hours"}, "xyz789XYZ")]),
    ("content_and_call", "Let me check the weather.",
     [call("get_weather", {"location": "Zürich"}, "abcDEF123")]),
    ("nested_args", None,
     [call("search", {"query": "what's \"new\" in Zürich? <b>&</b>",
                      "filters": {"n": 3, "tags": ["a", "b"], "exact": True, "score": 0.5, "none": None}},
           "abcDEF123")]),
]


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def tojson(value, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 12, 4).strftime(fmt)
    return env


# What the generation prompt opens the assistant turn with (the model does not
# write it), per format.
HEADERS = {
    "llama3_json": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "hermes": "<|im_start|>assistant\n",
    "qwen3_coder": "<|im_start|>assistant\n",
    "mistral": "",
    "harmony": "<|start|>assistant",
    "deepseek": "<｜Assistant｜>",
    "glm": "<|assistant|>",
    "kimi_k2": "<|im_assistant|>assistant<|im_middle|>",
    "minimax": "<beginning_of_sentence>ai name=assistant\n",
    "command_r": "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
}
# Templates whose assistant turn opens differently from their format's usual.
TEMPLATE_HEADERS = {
    "ibm-granite-granite-4.0.jinja": "<|start_of_role|>assistant<|end_of_role|>",
    "Spark2.5.jinja": "<｜start▁of▁sentence｜><|Bot|>",
    # Its prompt already opens the turn (and closes an empty plan).
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "",
}
# What a template writes after the turn even without a generation prompt.
TRAILERS = {
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja":
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>",
}

# Renderings that are not what a model writes: the template moves the content
# into a separate assistant message after the calls.
SKIP = {("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "content_and_call"),
        ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "content_and_call")}


def main():
    env = environment()
    records = []
    for name, (fmt, bos, eos) in sorted(FAMILIES.items()):
        with open(os.path.join(TEMPLATES, name), encoding="utf-8") as f:
            source = f.read()
        template = env.from_string(source)
        for case, content, calls in CASES:
            variants = [("", {})]
            if name == "meta-llama-Llama-3.1-8B-Instruct.jinja" and case == "single":
                variants.append(("_builtin", {"builtin_tools": ["brave_search", "wolfram_alpha"]}))
            for suffix, extra in variants:
                if suffix == "_builtin":
                    calls_used = [call("brave_search", {"query": "weather in Paris"})]
                else:
                    calls_used = calls
                head = [{"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": "What is the weather in Paris?"}]
                ctx = dict(tools=TOOLS, bos_token=bos, eos_token=eos, **extra)
                full = None
                # Without content, the shortest of content "" and None (templates
                # write "None", or an empty extra message, for one or the other).
                for c in ([content] if content is not None else ["", None]):
                    turn = {"role": "assistant", "content": c, "tool_calls": calls_used}
                    try:
                        prompt = template.render(messages=head, add_generation_prompt=True, **ctx)
                        base = template.render(messages=head, add_generation_prompt=False, **ctx)
                        rendered = template.render(messages=head + [turn], add_generation_prompt=False,
                                                   **ctx)
                        if full is None or len(rendered) < len(full):
                            full = rendered
                    except (jinja2.exceptions.TemplateError, TypeError) as e:
                        print(f"skip {name} {case}{suffix} content={c!r}: {e}", file=sys.stderr)
                if full is None:
                    continue
                if (name, case) in SKIP:
                    continue
                if full.startswith(base):
                    text = full[len(base):]
                else:  # Mistral Nemo moves the tools next to the last user message.
                    text = full[full.rindex("[/INST]") + len("[/INST]"):]
                header = TEMPLATE_HEADERS.get(name, HEADERS[fmt])
                if not text.startswith(header):
                    raise SystemExit(f"{name} {case}: turn {text!r} does not open with {header!r}")
                text = text[len(header):]
                trailer = TRAILERS.get(name, "")
                if trailer and text.endswith(trailer):
                    text = text[:-len(trailer)]
                if fmt == "harmony":  # one call a message; the content is the analysis
                    calls_used = calls_used[:1]
                if not all(c["function"]["name"] in text for c in calls_used):
                    print(f"skip {name} {case}{suffix}: the template drops the calls", file=sys.stderr)
                    continue
                expected_content = content if content and content in text else ""
                reasoning = ""
                if fmt == "harmony" and expected_content:
                    reasoning, expected_content = expected_content, ""
                records.append({
                    "template": name, "case": case + suffix, "format": fmt,
                    "prompt_tail": prompt[len(base):], "text": text,
                    "content": expected_content, "reasoning": reasoning,
                    "calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                              for c in calls_used]})
    out = os.path.join(HERE, "data", "rendered.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(records, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(records)} records to {out}")


if __name__ == "__main__":
    main()
