#!/usr/bin/env python3
"""Writes the oracle vectors for tests/kernels (run by ctest as a fixture).

For every ggml type the reference code handles, writes into OUT_DIR:

  dequant_<T>.bin        random raw blocks (random bytes; f16/f32 scale
                         fields replaced by random *finite* values, so no NaN
                         arises unless a test puts one there on purpose;
                         F16/BF16 enumerate all 65536 bit patterns, NaNs and
                         infinities included)
  dequant_<T>.gguf.f32   gguf.quants.dequantize of those blocks
  dequant_<T>.ggml.f32   ggml's own dequantize_row_* (libggml-base from the
                         llama_cpp package), where that library is present
  dequant_<T>.numpy.f32  for Q8_1 only (neither gguf nor ggml dequantize it):
                         d * qs computed here with numpy
  quant_input.f32        rows of test data, 256-element blocks of varied
                         distributions (quant_input_kinds.txt names each)
  quant_<T>.gguf.bin     gguf.quants.quantize of quant_input (types it has)
  quant_<T>.ggml.bin     ggml's quantize_row_*_ref of quant_input
  float_specials.f32     f32 inputs for the F16/BF16 narrowing: every kind
                         of special value, ties, range edges, random bits
  float_specials.<F16|BF16>.<gguf|ggml>.bin   their conversions
  status.txt             "gguf: ok" or "gguf: missing (<why>)", then the
                         same line for "ggml"; the C++ tests skip with it.

Always exits 0 when it could write status.txt: a missing package is a skip
(reported by the C++ tests), not a failure.
"""

import argparse
import ctypes
import importlib.metadata
import importlib.util
import os
import sys

# name -> (ggml id, block size, type size, offsets of f16 fields, f32 fields)
TYPES = {
    "F32": (0, 1, 4, [], []),
    "F16": (1, 1, 2, [], []),
    "BF16": (30, 1, 2, [], []),
    "Q4_0": (2, 32, 18, [0], []),
    "Q4_1": (3, 32, 20, [0, 2], []),
    "Q5_0": (6, 32, 22, [0], []),
    "Q5_1": (7, 32, 24, [0, 2], []),
    "Q8_0": (8, 32, 34, [0], []),
    "Q8_1": (9, 32, 36, [0, 2], []),
    "Q2_K": (10, 256, 84, [80, 82], []),
    "Q3_K": (11, 256, 110, [108], []),
    "Q4_K": (12, 256, 144, [0, 2], []),
    "Q5_K": (13, 256, 176, [0, 2], []),
    "Q6_K": (14, 256, 210, [208], []),
    "Q8_K": (15, 256, 292, [], [0]),
    "MXFP4": (39, 32, 17, [], []),
}
BLOCKS_PER_TYPE = 128  # legacy types get 8x as many (they are 8x smaller)
QUANT_BLOCKS_PER_KIND = 8  # 256-element blocks of each input distribution


def write(out_dir, name, array):
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(array.tobytes())


def random_blocks(np, rng, name):
    _, block, size, f16_fields, f32_fields = TYPES[name]
    if name in ("F16", "BF16"):
        return np.arange(65536, dtype=np.uint16).view(np.uint8).copy()
    if name == "F32":
        bits = rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32)
        special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                            0x7F800001, 0xFFC12345, 0x00000001, 0x807FFFFF,
                            0x00800000, 0x7F7FFFFF], dtype=np.uint32)
        return np.concatenate([special, bits]).view(np.uint8).copy()
    n = BLOCKS_PER_TYPE * (8 if block == 32 else 1)
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for off in f16_fields:
        # Random finite f16 bit patterns (normal, subnormal, zero, both signs).
        h = rng.integers(0, 65536, size=n, dtype=np.uint32).astype(np.uint16)
        h = np.where((h & 0x7C00) == 0x7C00, h & 0xBFFF, h).astype(np.uint16)
        raw[:, off:off + 2] = h.reshape(n, 1).view(np.uint8)
    for off in f32_fields:
        f = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 3, n)).astype(np.float32)
        raw[:, off:off + 4] = f.reshape(n, 1).view(np.uint8)
    return raw.reshape(-1)


def quant_input(np, rng):
    """256-element blocks of ragged distributions; returns (data, kinds)."""
    n = 256
    kinds = {
        "gaussian": lambda: rng.standard_normal(n),
        "uniform": lambda: rng.uniform(-1, 1, n),
        "wide_range": lambda: rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3),
        "outliers": lambda: np.where(rng.random(n) < 0.02, 40.0, 1.0) * rng.standard_normal(n),
        "laplace": lambda: rng.laplace(0, 1, n),
        "negative_only": lambda: -np.abs(rng.standard_normal(n)),
        "positive_only": lambda: np.abs(rng.standard_normal(n)) + 0.5,
        "zeros": lambda: np.zeros(n),
        "constant": lambda: np.full(n, rng.uniform(-3, 3)),
        "tiny": lambda: rng.standard_normal(n) * 1e-5,
        "sparse": lambda: np.where(rng.random(n) < 0.1, rng.standard_normal(n), 0.0),
        "mixed_sub_blocks": lambda: rng.standard_normal(n) * np.repeat(
            10.0 ** rng.uniform(-2, 1, n // 16), 16),
    }
    data, names = [], []
    for name, make in kinds.items():
        for _ in range(QUANT_BLOCKS_PER_KIND):
            data.append(make().astype(np.float32))
            names.append(name)
    return np.concatenate(data), names


def float_specials(np, rng):
    """f32 inputs that exercise every branch of f32 -> f16 / bf16."""
    special = np.array([
        0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 65504.0, -65504.0, 65519.99,
        65520.0, 65536.0, 1e30, 2.0**-14, 2.0**-24, -(2.0**-24), 2.0**-25,
        2.0**-25 * 1.0001, 3 * 2.0**-26, 2.0**-26, 1e-30, 1.0 + 2.0**-11,
        1.0 + 3 * 2.0**-11, 3.0e38, -3.4e38], dtype=np.float32)
    special_bits = np.array([
        0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FA00000, 0xFFFFFFFF,
        0x7FC01234, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF,
        0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7F8000, 0x7F7F7FFF],
        dtype=np.uint32).view(np.float32)
    # Exact midpoints between neighbouring f16 values (ties to even), and
    # a hair either side of them.
    h = rng.integers(0, 0x7BFF, size=2048).astype(np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).astype(np.uint16).view(np.float16).astype(np.float64)
    mid = ((lo + hi) / 2).astype(np.float32)
    mid = mid * np.where(rng.random(mid.size) < 0.5, -1, 1).astype(np.float32)
    near = np.concatenate([np.nextafter(mid, np.float32(np.inf)),
                           np.nextafter(mid, np.float32(-np.inf))])
    rand_bits = rng.integers(0, 2**32, size=8192, dtype=np.uint64).astype(
        np.uint32).view(np.float32)
    return np.concatenate([special, special_bits, mid, near, rand_bits]).astype(np.float32)


def load_ggml():
    """libggml-base from the llama_cpp package, or (None, why)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return None, "llama_cpp package not installed"
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "lib", "libggml-base.so")
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                return None, f"cannot load {path}: {e}"
    return None, "libggml-base.so not found in the llama_cpp package"


def ggml_dequantize(np, lib, name, raw, n_elements):
    out = np.zeros(n_elements, dtype=np.float32)
    src = raw.ctypes.data_as(ctypes.c_void_p)
    dst = out.ctypes.data_as(ctypes.c_void_p)
    if name == "F16":
        fn = lib.ggml_fp16_to_fp32_row
    elif name == "BF16":
        fn = lib.ggml_bf16_to_fp32_row
    else:
        fn = getattr(lib, "dequantize_row_" + name.lower().replace("_k", "_K"), None)
        if fn is None:
            return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    fn(src, dst, ctypes.c_int64(n_elements))
    return out


def ggml_quantize(np, lib, name, data):
    _, block, size, _, _ = TYPES[name]
    out = np.zeros(data.size // block * size, dtype=np.uint8)  # zeroed
    src = data.ctypes.data_as(ctypes.c_void_p)
    dst = out.ctypes.data_as(ctypes.c_void_p)
    if name == "F16":
        fn = lib.ggml_fp32_to_fp16_row
    elif name == "BF16":
        fn = lib.ggml_fp32_to_bf16_row_ref
    else:
        fn = getattr(lib, "quantize_row_" + name.lower().replace("_k", "_K") + "_ref", None)
        if fn is None:
            return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    fn.restype = None
    fn(src, dst, ctypes.c_int64(data.size))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    status_path = os.path.join(args.out, "status.txt")

    try:
        import numpy as np
        import gguf
        from gguf import quants
    except ImportError as e:
        with open(status_path, "w") as f:
            f.write(f"gguf: missing ({sys.executable}: {e})\n")
            f.write("ggml: missing (numpy/gguf unavailable)\n")
        return 0

    rng = np.random.default_rng(args.seed)
    lib, ggml_why = load_ggml()
    qt = gguf.GGMLQuantizationType

    for name in TYPES:
        _, block, size, _, _ = TYPES[name]
        raw = random_blocks(np, rng, name)
        n_elements = raw.size // size * block
        write(args.out, f"dequant_{name}.bin", raw)
        try:
            with np.errstate(over="ignore"):  # MXFP4 e = 0xFF: 12 * 2^127
                expected = quants.dequantize(raw, qt[name])
            write(args.out, f"dequant_{name}.gguf.f32", expected.astype(np.float32))
        except NotImplementedError:
            pass  # the C++ test says gguf lacks this type
        if name == "Q8_1":
            blocks = raw.reshape(-1, size)
            d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
            qs = blocks[:, 4:].copy().view(np.int8).astype(np.float32)
            write(args.out, "dequant_Q8_1.numpy.f32", (qs * d).reshape(-1))
        if lib is not None:
            out = ggml_dequantize(np, lib, name, raw, n_elements)
            if out is not None:
                write(args.out, f"dequant_{name}.ggml.f32", out)

    data, kinds = quant_input(np, rng)
    write(args.out, "quant_input.f32", data)
    with open(os.path.join(args.out, "quant_input_kinds.txt"), "w") as f:
        f.write("\n".join(kinds) + "\n")
    for name in TYPES:
        try:
            q = quants.quantize(data, qt[name])
            write(args.out, f"quant_{name}.gguf.bin", np.ascontiguousarray(q).view(np.uint8))
        except NotImplementedError:
            pass
        if lib is not None and name != "F32":
            q = ggml_quantize(np, lib, name, data)
            if q is not None:
                write(args.out, f"quant_{name}.ggml.bin", q)

    specials = float_specials(np, rng)
    write(args.out, "float_specials.f32", specials)
    with np.errstate(invalid="ignore", over="ignore"):
        write(args.out, "float_specials.F16.gguf.bin", quants.quantize(specials, qt.F16))
        write(args.out, "float_specials.BF16.gguf.bin", quants.quantize(specials, qt.BF16))
    if lib is not None:
        for name in ("F16", "BF16"):
            write(args.out, f"float_specials.{name}.ggml.bin", ggml_quantize(np, lib, name, specials))

    with open(status_path, "w") as f:
        f.write(f"gguf: ok (gguf {importlib.metadata.version('gguf')}, "
                f"numpy {np.__version__}, seed {args.seed})\n")
        if lib is not None:
            f.write(f"ggml: ok ({ggml_why})\n")
        else:
            f.write(f"ggml: missing ({ggml_why})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
