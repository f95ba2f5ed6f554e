#!/usr/bin/env python3
"""`strata quantize IN OUT TYPE` keeps the model and its weights: checked with
the gguf package (an independent reader and dequantizer).

 - metadata equal to the source's but general.file_type (and split.* dropped);
 - the same tensors in the same order with the same shapes;
 - 1-D tensors byte-identical; matrices of TYPE (or a documented fallback when
   the row length does not fit TYPE's block);
 - every matrix, dequantized by gguf.quants, within the relative RMS error
   TYPE's bits allow of the source's dequantized values.

Usage: quantize_matches_source.py STRATA IN.gguf TYPE WORKDIR
Exits 77 (ctest: skipped) when the model or the gguf package is absent.
"""
import os
import subprocess
import sys

SKIP = 77

# Relative RMS error bound, ||out - src|| / ||src||, per target type. Rounding
# to a uniform grid of step d gives an RMS error d/sqrt(12); these bounds are
# that for each type's bits on Gaussian-like weights, with a margin of ~2x.
REL_RMS_BOUND = {
    "F32": 0.0, "F16": 1e-3, "BF16": 8e-3,
    "Q8_0": 0.01, "Q8_K": 0.01, "Q6_K": 0.03,
    "Q5_0": 0.07, "Q5_1": 0.07, "Q5_K": 0.06,
    "Q4_0": 0.14, "Q4_1": 0.12, "Q4_K": 0.11,
    "MXFP4": 0.25, "Q3_K": 0.25, "Q2_K": 0.45,
}
FALLBACK_OK = {"Q8_0", "F16", "Q5_0", "Q5_1", "Q4_0"}


def main() -> int:
    strata, src_path, qtype, workdir = sys.argv[1:5]
    if not os.path.exists(src_path):
        print(f"SKIP: model {src_path} absent")
        return SKIP
    try:
        import numpy as np
        from gguf import GGUFReader, GGMLQuantizationType
        from gguf.quants import dequantize
    except ImportError:
        print("SKIP: python packages gguf/numpy not installed (scripts/install-test-tools.sh)")
        return SKIP

    os.makedirs(workdir, exist_ok=True)
    out_path = os.path.join(workdir, f"{os.path.basename(src_path)}.{qtype}.gguf")
    subprocess.run([strata, "quantize", src_path, out_path, qtype], check=True)
    src, out = GGUFReader(src_path), GGUFReader(out_path)

    failures = []
    src_meta = {k: f.contents() for k, f in src.fields.items()
                if not k.startswith("GGUF.") and not k.startswith("split.")}
    out_meta = {k: f.contents() for k, f in out.fields.items() if not k.startswith("GGUF.")}
    for k in set(src_meta) | set(out_meta):
        if k == "general.file_type":
            continue
        if src_meta.get(k) != out_meta.get(k):
            failures.append(f"metadata {k} differs")
    if "general.file_type" not in out_meta:
        failures.append("general.file_type missing")

    if [t.name for t in src.tensors] != [t.name for t in out.tensors]:
        failures.append("tensor names/order differ")
    worst = 0.0
    counts = {"target": 0, "fallback": 0, "kept": 0}
    for s, o in zip(src.tensors, out.tensors):
        if list(s.shape) != list(o.shape):
            failures.append(f"{s.name}: shape {list(s.shape)} -> {list(o.shape)}")
            continue
        if len(s.shape) == 1 or s.n_elements == s.shape[0]:
            counts["kept"] += 1
            if o.tensor_type != s.tensor_type or bytes(s.data) != bytes(o.data):
                failures.append(f"{s.name}: 1-D tensor not copied as is")
            continue
        oname = o.tensor_type.name
        if oname == qtype:
            counts["target"] += 1
        elif oname in FALLBACK_OK:
            counts["fallback"] += 1
        else:
            failures.append(f"{s.name}: written as {oname}, want {qtype}")
            continue
        a = dequantize(s.data, s.tensor_type).astype(np.float64).ravel()
        b = dequantize(o.data, o.tensor_type).astype(np.float64).ravel()
        denom = np.sqrt(np.mean(a * a))
        rel = float(np.sqrt(np.mean((a - b) ** 2)) / denom) if denom > 0 else 0.0
        bound = REL_RMS_BOUND[oname] if oname != qtype else REL_RMS_BOUND[qtype]
        worst = max(worst, rel)
        if rel > bound:
            failures.append(f"{s.name} ({s.tensor_type.name}->{oname}): "
                            f"relative RMS error {rel:.4f} > {bound}")
    for f in failures[:20]:
        print("FAIL:", f)
    print(f"{os.path.basename(src_path)} -> {qtype}: {counts}, worst relative RMS "
          f"error {worst:.4f} (bound {REL_RMS_BOUND[qtype]}), {len(failures)} failures")
    os.remove(out_path)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
