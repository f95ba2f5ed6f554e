#!/usr/bin/env python3
"""Writes the expected renderings for the Jinja conformance and language tests.

Every template in data/templates/ is rendered over every conversation in
data/conversations/ with Python's jinja2 exactly as Hugging Face transformers'
apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks and
lstrip_blocks on, the loopcontrols extension and the {% generation %} tag, its
tojson override, raise_exception, strftime_now), with strftime_now's clock
pinned at NOW. Results go to data/expected/TEMPLATE.json:
{conversation: {"output": TEXT} | {"raise": MESSAGE} | {"error": "Type: message"}}.
The language cases in data/language_cases.json are rendered likewise into
data/language_expected.json.

Run with the venv's python: ~/.cache/strata/venv/bin/python tests/jinja/make_expected.py
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
NOW = 1785059430  # 2026-07-26 10:30:30 UTC; the C++ test pins the same
BOS = "<s>"
EOS = "</s>"


class Raised(Exception):
    pass


class GenerationTracker(Extension):
    # transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(NOW, tz=datetime.timezone.utc).strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    try:
        template = env.from_string(source)
        return {"output": template.render(**context)}
    except jinja2.exceptions.TemplateSyntaxError as e:
        return {"error": "TemplateSyntaxError: " + str(e)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"raise": str(e)}
        return {"error": type(e).__name__ + ": " + str(e)}
    except Exception as e:  # noqa: BLE001 - a template may fail in any Python way
        return {"error": type(e).__name__ + ": " + str(e)}


def conversation_context(conv):
    # What apply_chat_template passes: tools and documents are None when absent.
    context = {
        "messages": conv["messages"],
        "tools": conv.get("tools"),
        "documents": conv.get("documents"),
        "add_generation_prompt": conv.get("add_generation_prompt", True),
        "bos_token": BOS,
        "eos_token": EOS,
    }
    context.update(conv.get("kwargs", {}))
    return context


def main():
    env = environment()
    conv_dir = os.path.join(DATA, "conversations")
    convs = {}
    for name in sorted(os.listdir(conv_dir)):
        if name.endswith(".json"):
            with open(os.path.join(conv_dir, name), encoding="utf-8") as f:
                convs[name[:-5]] = json.load(f)
    tdir = os.path.join(DATA, "templates")
    counts = {"output": 0, "raise": 0, "error": 0}
    for name in sorted(os.listdir(tdir)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(tdir, name), encoding="utf-8") as f:
            source = f.read()
        results = {}
        for cname, conv in convs.items():
            results[cname] = render(env, source, conversation_context(conv))
            counts[next(iter(results[cname]))] += 1
        with open(os.path.join(DATA, "expected", name[:-6] + ".json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
            f.write("\n")
    cases_path = os.path.join(DATA, "language_cases.json")
    if os.path.exists(cases_path):
        with open(cases_path, encoding="utf-8") as f:
            cases = json.load(f)
        out = []
        for case in cases:
            result = render(env, case["template"], case.get("context", {}))
            out.append({"template": case["template"], "context": case.get("context", {}), **result})
        with open(os.path.join(DATA, "language_expected.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, ensure_ascii=False)
            f.write("\n")
    print(counts, file=sys.stderr)


if __name__ == "__main__":
    main()
