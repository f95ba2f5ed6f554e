#!/usr/bin/env python3
"""Writes data/expected.json: chat prompts rendered by Python jinja2.

Usage: make_expected.py [MODELS_DIR]   (default ~/.cache/strata/models)

Templates: SmolLM2's, read from its GGUF with the gguf package; the standard
templates of Gemma 3 and Gemma 2 (the Gemma GGUF we use carries none),
Llama 3, ChatML (Qwen-style, no default system), Mistral Instruct and Phi-3,
written out below as published. Each case records the template text, the
inputs and either the rendered prompt or the message the template raised, so
the C++ test needs neither the models nor Python.
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

GEMMA3 = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n"
)

GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
    "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\n'}}{% endif %}"
)

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' "
    "+ message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)

PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}"
    "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

U, A, S = "user", "assistant", "system"


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "single_user": [m(U, "Hello!")],
    "system_user": [m(S, "You are terse."), m(U, "What is 2+2?")],
    "multi_turn": [m(U, "Hi"), m(A, "Hello, how can I help?"),
                   m(U, "Tell me a joke.")],
    "system_multi_turn": [m(S, "Be kind.\n"), m(U, "Hi"), m(A, "Hey."),
                          m(U, "Bye")],
    "special_chars": [m(U, "  Line one\nline two\t\n{{ not jinja }} {% x %}"
                            " <b>&amp;</b> \"quotes\" 'single' \\back  ")],
    "unicode": [m(U, "héllo 世界 🙂 naïve\u00a0"), m(A, "\n  Ça va ?  \n"),
                m(U, "\u3000ok")],
    "empty_content": [m(U, "")],
    "not_alternating": [m(U, "one"), m(U, "two")],
    "assistant_first": [m(A, "I start"), m(U, "then you")],
    "system_only": [m(S, "Only a system message")],
    "other_role": [m(U, "call it"), m("tool", "42"), m(U, "thanks")],
}


def render(template, messages, add_generation_prompt, bos, eos):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return {"prompt": env.from_string(template).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=bos, eos_token=eos)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    models = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser(
        "~/.cache/strata/models")
    import gguf  # only needed for the SmolLM2 template
    reader = gguf.GGUFReader(
        os.path.join(models, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    smollm2 = reader.fields["tokenizer.chat_template"].contents()
    templates = {
        "smollm2": (smollm2, "<|im_start|>", "<|im_end|>"),
        "gemma3": (GEMMA3, "<bos>", "<eos>"),
        "gemma2": (GEMMA2, "<bos>", "<eos>"),
        "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
        "chatml": (CHATML, "", "<|im_end|>"),
        "mistral": (MISTRAL, "<s>", "</s>"),
        "phi3": (PHI3, "<s>", "<|endoftext|>"),
    }
    out = {"templates": {}, "cases": []}
    for name, (text, bos, eos) in templates.items():
        out["templates"][name] = text
        for conv_name, messages in CONVERSATIONS.items():
            for agp in (True, False):
                case = {"template": name, "conversation": conv_name,
                        "messages": messages, "add_generation_prompt": agp,
                        "bos_token": bos, "eos_token": eos}
                case.update(render(text, messages, agp, bos, eos))
                out["cases"].append(case)
    out["jinja2_version"] = jinja2.__version__
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                        "expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out['cases'])} cases to {path}")


if __name__ == "__main__":
    main()
