#!/usr/bin/env python3
"""Writes tool_calls_fuzz's seed corpus from tests/tool_calls/data/rendered.json:
one file per rendered case, in the target's format (a format byte, a flags
byte, then the model's text). Usage: make_tool_calls_seeds.py CORPUS_DIR"""
import json
import pathlib
import sys

# model/chat_template/tool_calls.h ToolCallFormat, in order.
FORMATS = ["none", "llama3_json", "hermes", "qwen3_coder", "glm", "mistral", "harmony",
           "deepseek", "kimi_k2", "minimax", "command_r"]

root = pathlib.Path(__file__).resolve().parents[2]
cases = json.loads((root / "tests/tool_calls/data/rendered.json").read_text())
out = pathlib.Path(sys.argv[1]) / "tool_calls"
out.mkdir(parents=True, exist_ok=True)
seen = set()
for case in cases:
    key = (case["format"], case["case"])
    if key in seen:  # one template per format and case keeps the corpus small
        continue
    seen.add(key)
    fmt = FORMATS.index(case["format"])
    think = 1 if "<think>" in case["text"] else 0
    name = f'{case["format"]}-{case["case"]}'
    data = bytes([fmt, think | (7 << 2)]) + case["text"].encode()
    (out / name).write_bytes(data)
