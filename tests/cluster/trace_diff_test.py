#!/usr/bin/env python3
"""scripts/trace-diff.py: identical traces, and the first (token, block,
worker) where two traces part."""
import json
import os
import subprocess
import sys
import tempfile


def write(path, entries):
    with open(path, "w") as f:
        for e in entries:
            f.write(json.dumps(e) + "\n")


def main():
    script = sys.argv[1]
    base = [{"seq": 1, "pos": p, "block": b, "worker": "w0" if b < 2 else "w1",
             "hash": f"{p * 16 + b + 1:016x}"} for p in range(3) for b in range(-1, 4)]
    other = [dict(e) for e in base]
    for e in other:
        if (e["pos"], e["block"]) >= (1, 2):
            e["hash"] = "ffff" + e["hash"][4:]
        e["worker"] = "stage 0"
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")
        write(a, base)
        write(b, list(reversed(base)))
        r = subprocess.run([sys.executable, script, a, b], capture_output=True, text=True)
        ok = r.returncode == 0 and "15 block outputs identical" in r.stdout
        print(("ok  " if ok else "FAIL"), "identical traces:", r.stdout.strip())
        failures += not ok
        write(b, other)
        r = subprocess.run([sys.executable, script, a, b], capture_output=True, text=True)
        ok = (r.returncode == 1 and "seq 1, token position 1, block 2" in r.stdout
              and "(worker w1)" in r.stdout and "(worker stage 0)" in r.stdout)
        print(("ok  " if ok else "FAIL"), "first difference:", r.stdout.strip())
        failures += not ok
        with open(b, "w") as f:
            f.write("not json\n")
        r = subprocess.run([sys.executable, script, a, b], capture_output=True, text=True)
        ok = r.returncode not in (0, 1)
        print(("ok  " if ok else "FAIL"), "bad input refused:", r.stderr.strip())
        failures += not ok
    print(f"{3 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
