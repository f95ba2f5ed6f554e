#!/usr/bin/env python3
"""`strata speed` and `strata hardware`: JSON shape, positive rates, flags.

Usage: speed_and_hardware.py STRATA {speed-json MODEL | speed-flags MODEL |
                                     hardware-json}

speed-json:   `strata speed --json` on a small model gives the named fields
              with positive tok/s; -p 0 / -n 0 skip one test (null).
speed-flags:  bad flags and bad input exit non-zero with a message on stderr.
hardware-json: `strata hardware --json` parses and has the named fields.

Exit 77 (ctest's skip) when the model is absent, saying so.
"""
import json
import os
import subprocess
import sys

SKIP = 77


def run(cmd, env=None):
    full = None
    if env is not None:
        full = dict(os.environ)
        full.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=full)


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)


def speed_json(strata, model):
    proc = run([strata, "speed", "-m", model, "-p", "24", "-n", "8", "-r", "2",
                "-t", "1", "--json"])
    check(proc.returncode == 0, f"speed exited {proc.returncode}: {proc.stderr}")
    out = json.loads(proc.stdout)
    check(out["model"] == model, f"model {out['model']!r}")
    check(out["threads"] == 1, f"threads {out['threads']}")
    check(out["decode_weight_bytes"] > 0, "decode_weight_bytes")
    check(out["kernels"].startswith("generated") or out["kernels"].startswith("reference"),
          f"kernels {out['kernels']}")
    check(out["tuned"] is True, f"tuned {out['tuned']}")
    for test, tokens in (("pp", 24), ("tg", 8)):
        r = out[test]
        check(r["tokens"] == tokens, f"{test}.tokens {r['tokens']}")
        check(r["tok_s"] > 0, f"{test}.tok_s {r['tok_s']}")
        check(r["best_tok_s"] >= r["tok_s"], f"{test}.best_tok_s < median")
        check(len(r["runs_tok_s"]) == 2, f"{test}.runs_tok_s")
    for p, n, skipped in (("0", "4", "pp"), ("16", "0", "tg")):
        proc = run([strata, "speed", "-m", model, "-p", p, "-n", n, "-r", "1",
                    "--no-warmup", "--json"])
        check(proc.returncode == 0, f"-p {p} -n {n}: {proc.stderr}")
        out = json.loads(proc.stdout)
        check(out[skipped] is None, f"-p {p} -n {n}: {skipped} not null")
        kept = "tg" if skipped == "pp" else "pp"
        check(out[kept]["tok_s"] > 0, f"-p {p} -n {n}: {kept}.tok_s")
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "4", "-r", "1"])
    check(proc.returncode == 0 and "pp8" in proc.stdout and
          "tg4" in proc.stdout, f"text output: {proc.stdout}{proc.stderr}")
    # -d: each test after that many tokens of context (llama-bench's
    # --n-depth); the depth counts toward the model's context.
    proc = run([strata, "speed", "-m", model, "-d", "16", "-p", "8", "-n", "4", "-r", "1",
                "--json"])
    check(proc.returncode == 0, f"-d 16: exit {proc.returncode}: {proc.stderr}")
    out = json.loads(proc.stdout)
    check(out["depth"] == 16 and out["pp"]["tok_s"] > 0 and out["tg"]["tok_s"] > 0,
          f"-d 16: {proc.stdout}")
    proc = run([strata, "speed", "-m", model, "-d", "16", "-p", "8", "-n", "4", "-r", "1"])
    check(proc.returncode == 0 and "pp8 @ d16" in proc.stdout and "tg4 @ d16" in proc.stdout,
          f"-d 16 text output: {proc.stdout}{proc.stderr}")
    print("speed --json: fields and positive tok/s; -d 16")


def speed_flags(strata, model):
    cases = [
        (["-r", "0"], 2), (["-t", "-1"], 2), (["-t", "1025"], 2), (["-p", "-1"], 2),
        (["-n", "-5"], 2), (["-p", "0", "-n", "0"], 2), (["-p", "x"], 2),
        (["-p", "100000000"], 2),   # over the 2^20 bound
        (["-p", "1000000"], 2),     # over the model's context
        (["-d", "1000000", "-p", "8"], 2),  # the depth too
        (["-d", "-1"], 2),
        (["--bogus"], 2),
    ]
    for extra, want in cases:
        proc = run([strata, "speed", "-m", model] + extra)
        check(proc.returncode == want,
              f"{extra}: exit {proc.returncode}, expected {want}")
        check(proc.stderr.strip() != "", f"{extra}: no message")
        print(f"{' '.join(extra)}: exit {want}: {proc.stderr.strip().splitlines()[0]}")
    # --isa: an unknown tier is refused naming the flag; a tier this CPU
    # lacks is refused saying what it lacks; avx2 with --no-tune runs.
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1", "--isa", "sse"])
    check(proc.returncode == 2 and "--isa: not an ISA tier (avx2, avx512, avx512vnni): sse" in proc.stderr,
          f"--isa sse: exit {proc.returncode}: {proc.stderr}")
    has_avx512 = "avx512f" in open("/proc/cpuinfo").read()
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1", "--isa", "avx512"])
    if has_avx512:
        check(proc.returncode == 0, f"--isa avx512 on an AVX-512 CPU: {proc.stderr}")
    else:
        check(proc.returncode == 2 and "forced by --isa" in proc.stderr and "lacks" in proc.stderr,
              f"--isa avx512 without AVX-512: exit {proc.returncode}: {proc.stderr}")
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1",
                "--isa", "avx2", "--no-tune", "--json"])
    check(proc.returncode == 0 and json.loads(proc.stdout)["tg"]["tok_s"] > 0,
          f"--isa avx2 --no-tune: exit {proc.returncode}: {proc.stderr}")
    out = json.loads(proc.stdout)
    check(out["kernels"] == "generated, avx2" and out["tuned"] is False,
          f"--isa avx2 --no-tune: kernels {out['kernels']}, tuned {out['tuned']}")
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1", "--json"],
               env={"STRATA_JIT": "0"})
    check(proc.returncode == 0 and
          json.loads(proc.stdout)["kernels"] == "reference (STRATA_JIT=0)",
          f"STRATA_JIT=0 speed: {proc.stdout}{proc.stderr}")
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1"],
               env={"STRATA_ISA": "bogus"})
    check(proc.returncode == 2 and "unknown ISA tier 'bogus'" in proc.stderr and
          model not in proc.stderr,
          f"STRATA_ISA=bogus speed: exit {proc.returncode}: {proc.stderr}")
    # Tuning is reported as it happens: not with reference kernels, nor with
    # more threads than CPUs.
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1", "--json"],
               env={"STRATA_JIT": "0"})
    check(json.loads(proc.stdout)["tuned"] is False, f"STRATA_JIT=0 tuned: {proc.stdout}")
    over = str(len(os.sched_getaffinity(0)) + 1)
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1", "-t", over,
                "--json"])
    check(proc.returncode == 0 and json.loads(proc.stdout)["tuned"] is False,
          f"-t {over} tuned: {proc.stdout}{proc.stderr}")
    print("--isa / --no-tune: refused and accepted as expected")
    # -t 0 means every CPU this process may use, as for `strata run`.
    proc = run([strata, "speed", "-m", model, "-p", "8", "-n", "2", "-r", "1", "-t", "0",
                "--json"])
    allowed = len(os.sched_getaffinity(0))
    check(proc.returncode == 0 and json.loads(proc.stdout)["threads"] == allowed,
          f"-t 0: exit {proc.returncode}, expected {allowed} threads: {proc.stdout}{proc.stderr}")
    print(f"-t 0: {allowed} threads")
    proc = run([strata, "speed", "-m", model + ".absent"])
    check(proc.returncode == 1 and "absent" in proc.stderr,
          f"missing model: exit {proc.returncode}: {proc.stderr}")
    proc = run([strata, "speed"])
    check(proc.returncode == 2 and "model" in proc.stderr.lower(),
          f"no -m: exit {proc.returncode}: {proc.stderr}")


def hardware_json(strata):
    proc = run([strata, "hardware", "--json"])
    check(proc.returncode == 0, f"hardware exited {proc.returncode}: {proc.stderr}")
    out = json.loads(proc.stdout)
    cpu = out["cpu"]
    check(cpu["logical_cpus"] >= 1 and cpu["allowed_cpus"] >= 1, f"cpu {cpu}")
    check(isinstance(cpu["model"], str) and cpu["model"], "cpu.model")
    check(isinstance(out["isa_flags"], list), "isa_flags")
    check(isinstance(out["caches"], list), "caches")
    reads = out["memory"]["read"]
    check(reads and reads[0]["threads"] == 1, f"memory.read {reads}")
    check(all(r["best_gb_s"] > 0 for r in reads), f"memory.read {reads}")
    check(all(t in out["kernels"] for t in ("Q4_0", "Q5_1", "Q6_K", "Q2_K", "Q3_K", "MXFP4")),
          "kernels: every weight type the engine multiplies")
    check(out["kernels"]["Q2_K"].startswith("reference"), "Q2_K: the reference matmul")
    proc = run([strata, "hardware", "-t", "-1"])
    check(proc.returncode == 2 and proc.stderr.strip(), "hardware -t -1")
    # As the engine decides: STRATA_JIT=0 lists the reference matmul for
    # every type, and a bad STRATA_ISA is refused (exit 2), not listed.
    proc = run([strata, "hardware", "--json"], env={"STRATA_JIT": "0"})
    check(proc.returncode == 0, f"STRATA_JIT=0 hardware: {proc.stderr}")
    off = json.loads(proc.stdout)
    check(off["isa_tier"] is None and "STRATA_JIT=0" in off["kernel_mode"],
          f"STRATA_JIT=0: tier {off['isa_tier']}, mode {off.get('kernel_mode')}")
    check(all(k.startswith("reference") for k in off["kernels"].values()),
          f"STRATA_JIT=0 kernels: {off['kernels']}")
    proc = run([strata, "hardware"], env={"STRATA_ISA": "bogus"})
    check(proc.returncode == 2 and "unknown ISA tier 'bogus'" in proc.stderr,
          f"STRATA_ISA=bogus hardware: exit {proc.returncode}: {proc.stderr}")
    if out["isa_tier"] is not None:
        check(out["kernel_mode"] == "generated, " + out["isa_tier"],
              f"kernel_mode {out['kernel_mode']}")
    rates = ", ".join("%.1f" % r["best_gb_s"] for r in reads)
    print(f"hardware --json: {cpu['model']}, read {rates} GB/s")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    strata, mode = sys.argv[1], sys.argv[2]
    if mode == "hardware-json":
        hardware_json(strata)
        return 0
    model = sys.argv[3]
    if not os.path.isfile(model):
        print(f"SKIP: {model} is absent (../shared/models)")
        return SKIP
    if mode == "speed-json":
        speed_json(strata, model)
    elif mode == "speed-flags":
        speed_flags(strata, model)
    else:
        print(f"unknown mode {mode}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
