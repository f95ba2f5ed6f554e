#!/usr/bin/env python3
"""bench/vs-llamacpp refuses bad flags before it runs anything.

Usage: vs_llamacpp_flags.py SCRIPT STRATA STREAM_TRIAD

Each case must exit with the expected status and a message on stderr, and
print no measurement (no "pair" line). llama-bench is stood in for by
/bin/true: every case fails before the first engine run, so neither engine
runs. An existing --json-out file survives a refused run unchanged.
"""
import os
import subprocess
import sys
import tempfile


def main():
    script, strata, stream = sys.argv[1:4]
    base = [sys.executable, script, "--strata", strata, "--stream", stream,
            "--llama-bench", "/bin/true"]
    tmp = tempfile.mkdtemp()
    kept = os.path.join(tmp, "earlier.json")
    with open(kept, "w") as f:
        f.write('{"earlier": true}')
    absent = os.path.join(tmp, "absent.gguf")
    cases = [
        (["--pairs", "3"], 2, "at least 5"),
        (["--timeout", "0"], 2, "at least 1 second"),
        (["-t", "0"], 2, "at least 1"),
        (["--max-spread", "-1"], 2, "positive"),
        (["--tests", "pp,pp"], 2, "named twice"),
        (["--tests", "xx"], 2, "a list of pp and tg"),
        (["--strata-args=-t 4"], 2, "repeats '-t'"),
        (["--strata-args=-t4"], 2, "repeats '-t'"),
        (["--strata-args=--threads=3"], 2, "repeats '--threads'"),
        (["--llama-args=-o csv"], 2, "repeats '-o'"),
        (["--llama-args='unclosed"], 2, "--llama-args"),
        (["--models", "nosuch"], 2, "neither a .gguf path"),
        (["--models", ","], 2, "no model named"),
        (["--models", absent], 1, "no model to measure"),
        (["--json-out", tmp], 2, "is a folder"),
        (["--json-out", os.path.join(tmp, "no", "x.json")], 2, "no folder"),
        (["--json-out", kept, "--models", "nosuch"], 2, "neither a .gguf path"),
        (["--strata", absent], 2, "not found"),
    ]
    failed = 0
    for extra, want, text in cases:
        proc = subprocess.run(base + extra, capture_output=True, text=True, timeout=60)
        ok = (proc.returncode == want and text in proc.stderr and
              " pair " not in proc.stdout)
        print(f"{'ok  ' if ok else 'FAIL'} {' '.join(extra)}: exit {proc.returncode}: "
              f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
        failed += not ok
    with open(kept) as f:
        if f.read() != '{"earlier": true}':
            print("FAIL: a refused run replaced the existing --json-out file")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
