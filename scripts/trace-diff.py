#!/usr/bin/env python3
"""Diffs two split-invariance traces and prints where they first part.

A trace is what `strata-coordinator --trace FILE` or `strata serve --trace
FILE` writes: one JSON object per line, the FNV-1a 64 hash of one block's
output row for one token position of one sequence,
    {"seq": 1, "pos": 5, "block": 3, "worker": "w1", "hash": "9f0c..."}
(blocks 0 to n_layer - 1; the embedding is not traced). Run the same requests, in the same order, on two
setups (1 worker against 2, two placements, ...) and diff:

    scripts/trace-diff.py a.jsonl b.jsonl

Entries are matched by (seq, pos, block); the first pair whose hashes differ,
in (seq, pos, block) order, is printed with the worker that computed each
side. Exit status: 0 identical, 1 they part, 2 bad input.
"""
import json
import sys


def load(path):
    entries = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
                key = (int(e["seq"]), int(e["pos"]), int(e["block"]))
                entries[key] = (str(e["hash"]), str(e.get("worker", "?")))
            except (ValueError, KeyError, TypeError) as err:
                print(f"{path}:{n}: not a trace entry ({err})", file=sys.stderr)
                sys.exit(2)
    return entries


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    a, b = load(argv[1]), load(argv[2])
    common = sorted(set(a) & set(b))
    for key in common:
        (ha, wa), (hb, wb) = a[key], b[key]
        if ha != hb:
            seq, pos, block = key
            what = "embedding" if block < 0 else f"block {block}"
            print(f"first difference: seq {seq}, token position {pos}, {what}: "
                  f"{argv[1]} {ha} (worker {wa}) vs {argv[2]} {hb} (worker {wb})")
            return 1
    only_a, only_b = len(a) - len(common), len(b) - len(common)
    print(f"{len(common)} block outputs identical"
          + (f"; {only_a} only in {argv[1]}" if only_a else "")
          + (f"; {only_b} only in {argv[2]}" if only_b else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
