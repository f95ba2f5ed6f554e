#!/usr/bin/env bash
# Builds the GGUF reader fuzzer (clang-14, libFuzzer + ASan + UBSan) and runs
# it for a while.
#
#   scripts/fuzz.sh [SECONDS]      default 60
#
# Build folder: build-fuzz/ in the clone (a CMake cache belongs to one source
# tree, so it is not shared between clones). Corpus, seeds and findings: ${STRATA_CACHE}/fuzz/gguf_reader/. The
# seed corpus is the first KiB of the real models (STRATA_MODELS_DIR), of
# ../shared's GGUFs when present, and a few small files written by
# make_gguf_seeds. Prints the number of executions; exits non-zero on a
# finding, whose input is saved under findings/ (turn it into a regression
# test in tests/model/).
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${STRATA_CACHE:-$HOME/.cache/strata}
# In the clone (a CMake build folder belongs to one source tree); ccache, when
# present, keeps rebuilds in a fresh clone cheap.
build=$root/build-fuzz
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} \
    CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
work=$cache/fuzz/gguf_reader
models=${STRATA_MODELS_DIR:-$cache/models}
shared=${STRATA_SHARED_DIR:-$root/../shared}
jobs=${STRATA_JOBS:-2}

CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON \
  -DSTRATA_MODELS_DIR="$models" -DSTRATA_SHARED_DIR="$shared" "${launcher[@]}" >/dev/null
cmake --build "$build" -j"$jobs" --target gguf_reader_fuzz make_gguf_seeds

fuzzer=$build/tests/fuzz/gguf_reader_fuzz
mkdir -p "$work/corpus" "$work/seeds" "$work/findings"

# Seeds: headers of real files (where the parser spends its effort).
rm -f "$work/seeds"/*
for f in "$models"/*.gguf "$shared"/models/*.gguf \
         "$shared"/conformance/tokenizer/*.gguf; do
  [[ -f $f ]] || continue
  base=$(basename "$f" .gguf)
  for kib in 1 4 64; do
    head -c $((kib * 1024)) "$f" >"$work/seeds/$base.head$kib"
  done
done
"$build/tests/fuzz/make_gguf_seeds" "$work/seeds"

echo "fuzzing the GGUF reader for ${seconds}s (corpus: $work/corpus)"
status=0
"$fuzzer" "$work/corpus" "$work/seeds" \
  -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -dict="$root/tests/fuzz/gguf.dict" \
  -artifact_prefix="$work/findings/" -print_final_stats=1 \
  >"$work/last.log" 2>&1 || status=$?

tail -n 25 "$work/last.log" | grep -E "^(stat::|Done|==|SUMMARY|artifact_prefix|Test unit)" || true
execs=$(grep -E "^stat::number_of_executed_units" "$work/last.log" | awk '{print $2}')
echo "executions: ${execs:-unknown} in ${seconds}s"
if [[ $status -ne 0 ]]; then
  echo "FINDING (fuzzer exit $status): see $work/last.log; input saved in $work/findings/" >&2
  ls -l "$work/findings/" >&2
  exit 1
fi
echo "no findings"
