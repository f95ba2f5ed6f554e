#!/usr/bin/env bash
# Builds strata for the GPU machine and gathers what runs there into one
# folder (default gpu-bundle/ in the clone, git-ignored), under 60 MiB:
#
#   bin/      strata, strata-worker, strata-coordinator; strata_cuda_tests
#             (when the CUDA kernel tests exist), strata_nccl_tests (when
#             CUDA and NCCL are found), cuda-read-bandwidth (bench/
#             cuda_read_bandwidth.cu, when nvcc exists); all stripped
#   lib/      every shared library they load that a bare Ubuntu 24.04 +
#             CUDA 13 + NCCL image lacks (gRPC, protobuf, abseil, yaml-cpp,
#             OpenSSL, ...: Debian 12's, as built against)
#   models/   stories260K.gguf; smollm2-tokenizer.gguf (the tokenizer.* keys
#             of SmolLM2-135M, 1.7 MB) and tiny.sha256
#   py/       gguf (the Python package), make_tiny_models.py,
#             make_tiny_rope_models.py: gpu-check.sh makes the twelve tiny
#             random-weight models there, byte-identical to
#             scripts/make-test-models.sh's (166 MiB: they do not fit; the
#             sums in models/tiny.sha256 say whether they came out the same)
#   gpu-check.sh, bundle.json (what was built: version, CUDA on or off, the
#             binaries, the libraries)
#
# Usage: scripts/gpu-bundle.sh [OUT_DIR]   (docs/gpu.md)
#   STRATA_JOBS: build jobs (default: the CPUs). Build dir: build-cuda/.
# Fails when a binary's library resolves nowhere allowed, or when the folder
# is over 60 MiB (a device run carries at most 64 MiB with the clone).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
OUT="${1:-$STRATA_ROOT/gpu-bundle}"
BUILD="$STRATA_ROOT/build-cuda"
LIMIT_MIB=60

# --- build ------------------------------------------------------------------
NVCC="$(command -v nvcc || true)"
[[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
cuda_args=()
if [[ -n "$NVCC" ]]; then
  # Before the CUDA backend lands CMake does not know STRATA_CUDA and only
  # warns that the variable went unused; after, ON makes a missing CUDA
  # toolchain an error instead of a silent CPU-only build.
  cuda_args=(-DSTRATA_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
  log "nvcc: $NVCC; configuring $BUILD with -DSTRATA_CUDA=ON"
else
  log "no nvcc: a CPU-only bundle (every CUDA step of gpu-check.sh will skip)"
fi
mkdir -p "$BUILD"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$STRATA_ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_MODELS_DIR="$STRATA_MODELS" -DSTRATA_PYTHON="$STRATA_VENV/bin/python" \
  "${launcher[@]}" "${cuda_args[@]}" >"$BUILD/configure.log" 2>&1 || {
  cat "$BUILD/configure.log" >&2; exit 1; }
targets=(strata strata_worker_main strata-coordinator)
# The test binaries that exist in this tree and configuration: the CUDA
# kernel tests (tests/cuda/, with the CUDA backend) and the NCCL link's
# (with CUDA and NCCL).
# The list is read whole first: `grep -q` on the pipe would close it at the
# first match and kill the listing with SIGPIPE, which under pipefail
# dropped the target it had found.
test_targets=()
all_targets="$(cmake --build "$BUILD" --target help)"
for t in strata_cuda_tests strata_nccl_tests; do
  if grep -q "^$t:" <<<"$all_targets"; then test_targets+=("$t"); fi
done
targets+=("${test_targets[@]}")
log "building ${targets[*]} in $BUILD"
cmake --build "$BUILD" -j "$STRATA_JOBS" --target "${targets[@]}"

# --- binaries -----------------------------------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/models" "$OUT/py"
binaries=("$BUILD/client/cli/strata" "$BUILD/worker/strata-worker"
          "$BUILD/coordinator/strata-coordinator")
for t in "${test_targets[@]}"; do
  path="$(find "$BUILD" -name "$t" -type f -perm -u+x | head -1)"
  [[ -n "$path" ]] || { log "$t built but not found under $BUILD"; exit 1; }
  binaries+=("$path")
done
for b in "${binaries[@]}"; do
  strip --strip-unneeded -o "$OUT/bin/$(basename "$b")" "$b"
done
if [[ -n "$NVCC" ]]; then
  # The runtime linked statically (nvcc's default): it needs only libcuda.
  "$NVCC" -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 \
    -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
    -o "$OUT/bin/cuda-read-bandwidth" "$STRATA_ROOT/bench/cuda_read_bandwidth.cu"
  strip --strip-unneeded "$OUT/bin/cuda-read-bandwidth"
fi

# --- shared libraries ---------------------------------------------------------
# What a bare Ubuntu 24.04 image with CUDA 13 and NCCL installed already has,
# and must provide itself:
#   - glibc's own libraries (libc, libm, libpthread, libdl, librt, libutil,
#     libresolv, the loader, the vDSO): they are one unit with the loader
#     there, so a copy of Debian 12's (2.36) would clash with Ubuntu's 2.39
#     loader; programs built against 2.36 run on 2.39.
#   - libstdc++ and libgcc_s: Ubuntu 24.04's (GCC 14) are newer than Debian
#     12's (GCC 12) and backward compatible, and CUDA's libraries there load
#     them too (two copies in one process would be worse).
#   - CUDA's: libcuda (the driver's: must match the kernel module, never
#     copied), libcudart, libnvrtc (+ builtins), libnvJitLink, libcublas,
#     libcublasLt (CUDA 13.0 in /usr/local/cuda/lib64 there), libnccl
#     (NCCL 2.28 as a system library there): the machine's own, matched to
#     its driver.
# Everything else (gRPC 1.51, protobuf, abseil, yaml-cpp, re2, c-ares,
# OpenSSL, zlib, utf8proc, fmt, spdlog, ...) is copied: ../shared/FACTS.md
# says that image has none of them (zlib and OpenSSL it may have, but a copy
# matched to what gRPC was built against costs little).
system_lib() {
  case "$1" in
    linux-vdso.so.*|ld-linux*.so.*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|\
    librt.so.*|libutil.so.*|libresolv.so.*|libmvec.so.*) return 0 ;;
    libstdc++.so.*|libgcc_s.so.*) return 0 ;;
    libcuda.so.*|libcudart.so.*|libnvrtc.so.*|libnvrtc-builtins.so.*|libnvJitLink.so.*|\
    libcublas.so.*|libcublasLt.so.*|libnccl.so.*) return 0 ;;
  esac
  return 1
}
declare -A copied=()
for b in "$OUT"/bin/*; do
  # "libfoo.so.1 => /path/libfoo.so.1.2 (0x...)"; "libbar.so => not found".
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    system_lib "$name" && continue
    if [[ "$path" == "not" ]]; then
      log "$(basename "$b"): $name not found here, and not one the image has"; exit 1
    fi
    [[ -n "${copied[$name]:-}" ]] && continue
    cp -L "$path" "$OUT/lib/$name"
    chmod u+w "$OUT/lib/$name"
    strip --strip-unneeded "$OUT/lib/$name"
    copied[$name]=1
  done < <(ldd "$b")
done

# Every library of every binary now resolves from lib/ or the system set.
check_resolution() {
  local bad=0
  for b in "$OUT"/bin/*; do
    while read -r name arrow path _; do
      [[ "$arrow" == "=>" ]] || continue
      if [[ "$path" == "$OUT/lib/"* ]]; then continue; fi
      if system_lib "$name"; then continue; fi
      log "$(basename "$b"): $name resolves to $path, outside lib/ and the system set"
      bad=1
    done < <(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$OUT/lib" ldd "$b")
  done
  return $bad
}
check_resolution || exit 1

# --- models and the tiny-model makers -----------------------------------------
shared="${STRATA_SHARED_DIR:-$(dirname "$STRATA_ROOT")/shared}"
stories="$shared/models/stories260K.gguf"
[[ -f "$stories" ]] || { log "$stories not found (STRATA_SHARED_DIR)"; exit 1; }
cp "$stories" "$OUT/models/stories260K.gguf"
smollm2="$STRATA_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
[[ -f "$smollm2" ]] || { log "$smollm2 missing: run scripts/fetch-models.sh"; exit 1; }
"$STRATA_VENV/bin/python" -c 'import gguf' 2>/dev/null ||
  { log "no gguf package in $STRATA_VENV: run scripts/install-test-tools.sh"; exit 1; }
"$STRATA_VENV/bin/python" - "$STRATA_ROOT/scripts" "$smollm2" "$OUT/models/smollm2-tokenizer.gguf" <<'PY' >/dev/null
# The tokenizer.* keys of SmolLM2 in a GGUF of their own: all that
# make_tiny_models.py reads of --smollm2 (tokenizer_fields).
import sys
sys.path.insert(0, sys.argv[1])
import gguf
from make_tiny_models import copy_tokenizer, tokenizer_fields, write_file
w = gguf.GGUFWriter(sys.argv[3], "llama")
copy_tokenizer(w, tokenizer_fields(sys.argv[2]))
write_file(w, sys.argv[3])
PY
tiny="$STRATA_MODELS/tiny"
if compgen -G "$tiny/tiny-*.gguf" >/dev/null; then
  (cd "$tiny" && sha256sum tiny-*.gguf) >"$OUT/models/tiny.sha256"
else
  log "no tiny models under $tiny (scripts/make-test-models.sh): no sums to compare there"
  : >"$OUT/models/tiny.sha256"
fi
gguf_pkg="$("$STRATA_VENV/bin/python" -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')"
cp -r "$gguf_pkg" "$OUT/py/gguf"
rm -rf "$OUT/py/gguf/__pycache__"
cp "$STRATA_ROOT/scripts/make_tiny_models.py" "$STRATA_ROOT/scripts/make_tiny_rope_models.py" "$OUT/py/"
cp "$STRATA_ROOT/scripts/gpu-check.sh" "$OUT/gpu-check.sh"
chmod +x "$OUT/gpu-check.sh"

# --- smoke test from the bundle alone -----------------------------------------------
# The binaries run here with nothing but lib/ (and the system set): a clean
# environment, --version and a one-process greedy run on stories260K. A CUDA
# build that links the driver (libcuda.so.1) cannot start on a machine
# without one: it gets CUDA's stub here, for these probes only (never
# bundled; the GPU machine has the real one).
probe_path="$OUT/lib"
if ! ldconfig -p | grep -q 'libcuda\.so\.1 ' && [[ -n "$NVCC" ]]; then
  stub="$(dirname "$(dirname "$NVCC")")/lib64/stubs/libcuda.so"
  if [[ -f "$stub" ]]; then
    stub_dir="$BUILD/driver-stub"
    mkdir -p "$stub_dir"
    ln -sf "$stub" "$stub_dir/libcuda.so.1"
    probe_path="$OUT/lib:$stub_dir"
  fi
fi
in_bundle() { env -i PATH=/usr/bin:/bin HOME="$BUILD" LD_LIBRARY_PATH="$probe_path" "$@"; }
version="$(in_bundle "$OUT/bin/strata" --version 2>&1 | head -1)" || true
if ! in_bundle "$OUT/bin/strata" run -m "$OUT/models/stories260K.gguf" -p "Once upon a time" \
    -n 8 --temp 0 --json >"$BUILD/bundle-smoke.json" 2>"$BUILD/bundle-smoke.err"; then
  log "strata run from the bundle alone failed:"; cat "$BUILD/bundle-smoke.err" >&2; exit 1
fi
log "from the bundle alone: $version; strata run on stories260K: $(grep -o '"text":"[^"]*"' "$BUILD/bundle-smoke.json")"

# --- manifest and size ------------------------------------------------------------
json_list() { local s="" x; for x in "$@"; do s+="${s:+, }\"$x\""; done; printf '[%s]' "$s"; }
# What this build has, read off the binaries: the CUDA backend (strata run
# takes --backend) and the NCCL link (its tests were built).
cuda_on=0
in_bundle "$OUT/bin/strata" run --help 2>&1 | grep -q -- '--backend' && cuda_on=1
nccl_on=0
[[ -x "$OUT/bin/strata_nccl_tests" ]] && nccl_on=1
have_cuda_tests=0
[[ -x "$OUT/bin/strata_cuda_tests" ]] && have_cuda_tests=1
cat >"$OUT/bundle.json" <<EOF
{"version": "$version",
 "commit": "$(git -C "$STRATA_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)",
 "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
 "nvcc": $([[ -n "$NVCC" ]] && echo "\"$("$NVCC" --version | grep -o 'release [0-9.]*' | head -1)\"" || echo null),
 "cuda_backend": $([[ $cuda_on == 1 ]] && echo true || echo false),
 "nccl_link": $([[ $nccl_on == 1 ]] && echo true || echo false),
 "cuda_tests": $([[ $have_cuda_tests == 1 ]] && echo true || echo false),
 "binaries": $(cd "$OUT/bin" && json_list *),
 "libraries": $(cd "$OUT/lib" && json_list *)}
EOF
size_kib="$(du -sk "$OUT" | cut -f1)"
size_mib="$(awk -v k="$size_kib" 'BEGIN { printf "%.1f", k / 1024 }')"
log "bundle: $OUT, $size_mib MiB ($(ls "$OUT/bin" | wc -l) binaries, $(ls "$OUT/lib" | wc -l) libraries)"
if (( size_kib > LIMIT_MIB * 1024 )); then
  log "the bundle is $size_mib MiB, over the $LIMIT_MIB MiB limit"
  exit 1
fi
