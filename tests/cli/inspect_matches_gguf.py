#!/usr/bin/env python3
"""`strata inspect --json` agrees with the gguf package's reader on every
metadata key and value and every tensor (name, type, shape, offset, bytes).

Usage: inspect_matches_gguf.py STRATA_BINARY MODEL.gguf
Exits 77 (ctest: skipped) when the model or the gguf package is absent.
"""
import json
import math
import os
import subprocess
import sys

SKIP = 77


def main() -> int:
    strata, model = sys.argv[1], sys.argv[2]
    if not os.path.exists(model):
        print(f"SKIP: model {model} absent (run scripts/fetch-models.sh)")
        return SKIP
    try:
        import gguf  # noqa: F401
        from gguf import GGUFReader
    except ImportError:
        print("SKIP: python package gguf not installed (scripts/install-test-tools.sh)")
        return SKIP

    out = subprocess.run([strata, "inspect", "--json", model],
                         check=True, capture_output=True).stdout
    ours = json.loads(out)
    reader = GGUFReader(model)

    failures = []
    theirs_meta = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        theirs_meta[name] = field.contents()
    if list(ours["metadata"].keys()) != list(theirs_meta.keys()):
        failures.append(f"key order/set differs: {set(ours['metadata']) ^ set(theirs_meta)}")

    def same(a, b):
        if isinstance(b, float):
            return isinstance(a, (int, float)) and (
                (math.isnan(a) and math.isnan(b)) or float(a) == b)
        if isinstance(b, list):
            return isinstance(a, list) and len(a) == len(b) and all(
                same(x, y) for x, y in zip(a, b))
        return a == b and type(a) is type(b)

    for key, value in theirs_meta.items():
        if key in ours["metadata"] and not same(ours["metadata"][key], value):
            failures.append(f"metadata {key}: ours {str(ours['metadata'][key])[:200]} "
                            f"theirs {str(value)[:200]}")

    data_offset = reader.data_offset
    if ours.get("data_offset") != data_offset:
        failures.append(f"data_offset ours {ours.get('data_offset')} theirs {data_offset}")
    if len(ours["tensors"]) != len(reader.tensors):
        failures.append(f"tensor count ours {len(ours['tensors'])} theirs {len(reader.tensors)}")
    for mine, t in zip(ours["tensors"], reader.tensors):
        want = {
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in t.shape],
            "offset": int(t.data_offset) - data_offset,
            "bytes": int(t.n_bytes),
        }
        got = {k: mine[k] for k in want}
        if got != want:
            failures.append(f"tensor {t.name}: ours {got} theirs {want}")

    # Text output: an array key shows its first --max-array-items items and
    # how many more ("[... (N more)]" when none is shown).
    for shown in (0, 2):
        text = subprocess.run([strata, "inspect", "--max-array-items", str(shown), model],
                              check=True, capture_output=True, text=True).stdout
        for name, value in theirs_meta.items():
            if not isinstance(value, list) or len(value) <= shown:
                continue
            line = next((l for l in text.splitlines() if l.split()[:1] == [name]), None)
            want_end = ("[" if shown == 0 else ", ") + f"... ({len(value) - shown} more)]"
            if line is None or not line.endswith(want_end):
                failures.append(f"--max-array-items {shown}: {name}: {line!r}")

    for f in failures[:20]:
        print("MISMATCH:", f)
    print(f"{model}: {len(theirs_meta)} keys, {len(reader.tensors)} tensors compared, "
          f"{len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
