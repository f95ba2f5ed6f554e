#!/usr/bin/env bash
# Builds llama.cpp's own `llama-bench` once, from the llama-cpp-python source
# distribution (its sdist carries llama.cpp under vendor/llama.cpp), for
# bench/vs-llamacpp, with `llama-batched-bench` (many sequences decoding
# together), `ggml-rpc-server` (llama.cpp's own split over processes,
# -DGGML_RPC=ON) and `llama-server` (its OpenAI-compatible HTTP server, for
# bench/vs-llama-server) beside it in the same bin/.
# Idempotent: when the build is there it prints its path and asks no
# registry. Prints the path of llama-bench on stdout.
#
#   scripts/build-llama-bench.sh            # -> ~/.cache/strata/llama.cpp-build/0.3.36/bin/llama-bench
#   scripts/build-llama-bench.sh avx2       # -> .../0.3.36-avx2/bin/llama-bench
#
# `avx2` builds ggml for AVX2 + FMA + F16C only (no AVX-512, no VNNI), so
# that on an AVX-512 machine llama.cpp's AVX2 code can be run beside
# strata's avx2 tier (STRATA_ISA=avx2): the comparison an AVX2-only CPU
# gives, on this machine's cores. Any other argument is refused.
#
# The only download is the sdist (pip download, once, into
# $STRATA_CACHE/llama-cpp-python-src). The default build is native
# (-DGGML_NATIVE=ON: the instruction set of this machine, as llama.cpp users
# build it; `avx2` below is the other one) and
# keyed by the llama-cpp-python version; a stamp holds the CPU's flags, and
# a different CPU (a copied cache) rebuilds.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
MODE="${1-native}"
case "$MODE" in
  native) read -r -a isa_flags <<<"$(ggml_cpu_flags)"; suffix="" ;;
  avx2) isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
                   -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
        suffix="-avx2" ;;
  *) log "unknown mode '$MODE': expected no argument (native) or avx2"; exit 2 ;;
esac
(( $# <= 1 )) || { log "at most one argument (avx2)"; exit 2; }
SRC_CACHE="$STRATA_CACHE/llama-cpp-python-src"
BUILD_DIR="$STRATA_CACHE/llama.cpp-build/$VERSION$suffix"
BIN="$BUILD_DIR/bin/llama-bench"
STAMP="$BUILD_DIR/.strata-stamp"

cpu_flags() { grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-16; }
want_stamp="llama-cpp-python==$VERSION $MODE cpu=$(cpu_flags) rpc batched-bench server"
# The avx2 build's flags are part of its stamp (the native stamp stays as
# it was, so existing caches are kept).
if [[ "$MODE" == avx2 ]]; then want_stamp+=" ${isa_flags[*]}"; fi

if [[ -x "$BIN" && -x "$BUILD_DIR/bin/llama-batched-bench" && -x "$BUILD_DIR/bin/ggml-rpc-server" &&
      -x "$BUILD_DIR/bin/llama-server" &&
      -f "$STAMP" && "$(cat "$STAMP")" == "$want_stamp" ]]; then
  echo "$BIN"
  exit 0
fi

sdist="$(ls "$SRC_CACHE"/llama_cpp_python-"$VERSION".tar.gz 2>/dev/null || true)"
if [[ -z "$sdist" ]]; then
  log "downloading the llama-cpp-python $VERSION sdist (once)"
  mkdir -p "$SRC_CACHE"
  PY="$STRATA_VENV/bin/python"
  [[ -x "$PY" ]] || PY=python3
  "$PY" -m pip download -q --disable-pip-version-check --no-binary :all: \
    --no-deps -d "$SRC_CACHE" "llama-cpp-python==$VERSION"
  sdist="$SRC_CACHE/llama_cpp_python-$VERSION.tar.gz"
fi
[[ -f "$sdist" ]] || { log "no sdist at $sdist"; exit 1; }

src="$SRC_CACHE/llama_cpp_python-$VERSION"
if [[ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]]; then
  log "unpacking $sdist"
  rm -rf "$src"
  tar -xzf "$sdist" -C "$SRC_CACHE"
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
log "building llama-bench (llama.cpp from llama-cpp-python $VERSION) in $BUILD_DIR"
rm -f "$STAMP"
cmake -S "$src/vendor/llama.cpp" -B "$BUILD_DIR" "${generator[@]}" "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" -DLLAMA_CURL=OFF -DGGML_RPC=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build "$BUILD_DIR" --target llama-bench llama-batched-bench ggml-rpc-server llama-server \
  -j "$STRATA_JOBS" >/dev/null
[[ -x "$BIN" ]] || { log "llama-bench not found at $BIN after the build"; exit 1; }
echo "$want_stamp" > "$STAMP"
log "llama-bench ready: $BIN"
echo "$BIN"
