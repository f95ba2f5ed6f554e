#!/usr/bin/env bash
# Builds the fuzz targets of tests/fuzz/ (clang-14, libFuzzer + ASan +
# UBSan), replays each committed seed corpus (tests/fuzz/corpus/NAME/), then
# fuzzes each target in turn for its share of the time.
#
#   scripts/fuzz.sh [SECONDS] [NAME...]   SECONDS: the total fuzzing time,
#                                         split evenly across the targets
#                                         (default 60); NAMEs: only those
#
# Build folder: build-fuzz/ in the clone (a CMake cache belongs to one source
# tree, so it is not shared between clones). It is configured as CI's
# sanitizer build (ASan + UBSan, -O1 -g1), so the libraries under the
# targets come from the compiler cache that build fills; only the surfaces'
# own sources carry libFuzzer's coverage instrumentation
# (tests/fuzz/CMakeLists.txt).
#
# Per target, under ${STRATA_CACHE}/fuzz/NAME/: corpus/ (what fuzzing
# found, kept between runs), findings/ (crashing inputs), last.log. The
# GGUF reader also starts from the first KiBs of the real models
# (STRATA_MODELS_DIR and ../shared's GGUFs), in seeds/.
#
# Prints the executions per target; exits non-zero on any finding, in the
# replay or in fuzzing: fix it, and commit the input into
# tests/fuzz/corpus/NAME/ as regress-WHAT so that every run replays it.
set -euo pipefail

seconds=${1:-60}
shift || true
all=(worker_activations worker_control generate_request openai_request http_request
     cluster_config worker_config gguf_reader tool_calls jinja_template grammar json_schema tokenizer)
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all[@]}")

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${STRATA_CACHE:-$HOME/.cache/strata}
build=$root/build-fuzz
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$cache/ccache} CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} \
    CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
models=${STRATA_MODELS_DIR:-$cache/models}
shared=${STRATA_SHARED_DIR:-$root/../shared}
jobs=${STRATA_JOBS:-2}
corpora=$root/tests/fuzz/corpus

# The same flags as scripts/test.sh's sanitizer build (its compiler cache),
# CUDA off as there.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DSTRATA_CUDA=OFF \
  -DSTRATA_FUZZ=ON -DSTRATA_SANITIZE=ON -DSTRATA_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DSTRATA_MODELS_DIR="$models" -DSTRATA_SHARED_DIR="$shared" "${launcher[@]}" >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("${t}_fuzz"); done
cmake --build "$build" -j"$jobs" --target "${build_targets[@]}" make_gguf_seeds

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
per=$(( seconds / ${#targets[@]} ))
(( per >= 1 )) || per=1
status=0
summary=()
for t in "${targets[@]}"; do
  fuzzer=$build/tests/fuzz/${t}_fuzz
  work=$cache/fuzz/$t
  mkdir -p "$work/corpus" "$work/findings"
  dirs=("$work/corpus" "$corpora/$t")
  flags=(-rss_limit_mb=3072 -timeout=30 -artifact_prefix="$work/findings/")
  case $t in
    gguf_reader)
      mkdir -p "$work/seeds"
      rm -f "$work/seeds"/*
      for f in "$models"/*.gguf "$shared"/models/*.gguf "$shared"/conformance/tokenizer/*.gguf; do
        [[ -f $f ]] || continue
        base=$(basename "$f" .gguf)
        for kib in 1 4 64; do head -c $((kib * 1024)) "$f" >"$work/seeds/$base.head$kib"; done
      done
      "$build/tests/fuzz/make_gguf_seeds" "$work/seeds"
      dirs+=("$work/seeds")
      flags+=(-max_len=65536 -dict="$root/tests/fuzz/gguf.dict") ;;
    # A request may be up to the API's body limit; libFuzzer's default cap
    # (4 KiB) never reaches deep nesting or long fields.
    openai_request|generate_request) flags+=(-max_len=65536 -dict="$root/tests/fuzz/json.dict") ;;
    json_schema) flags+=(-max_len=65536 -dict="$root/tests/fuzz/json.dict") ;;
    grammar) flags+=(-max_len=65536 -dict="$root/tests/fuzz/gbnf.dict") ;;
    tokenizer) flags+=(-max_len=16384) ;;
    jinja_template)
      # The published chat templates are seeds too (up to ~30 KiB each).
      dirs+=("$root/tests/jinja/data/templates")
      flags+=(-max_len=65536 -dict="$root/tests/fuzz/jinja.dict") ;;
    http_request) flags+=(-dict="$root/tests/fuzz/http.dict") ;;
    cluster_config|worker_config) flags+=(-dict="$root/tests/fuzz/yaml.dict") ;;
    worker_control) flags+=(-dict="$root/tests/fuzz/worker.dict") ;;
  esac

  # Replay: every committed input once (-runs=0 runs the corpus, no more).
  if ! "$fuzzer" -runs=0 "${flags[@]}" "$corpora/$t" >"$work/replay.log" 2>&1; then
    echo "FINDING in the committed corpus of $t: see $work/replay.log" >&2
    tail -n 30 "$work/replay.log" >&2
    status=1
    summary+=("$t: corpus replay FAILED")
    continue
  fi

  echo "fuzzing $t for ${per}s (corpus: $work/corpus)"
  rc=0
  "$fuzzer" "${dirs[@]}" -max_total_time="$per" -print_final_stats=1 "${flags[@]}" \
    >"$work/last.log" 2>&1 || rc=$?
  execs=$(grep -E "^stat::number_of_executed_units" "$work/last.log" | awk '{print $2}' || true)
  if [[ $rc -ne 0 ]]; then
    echo "FINDING in $t (fuzzer exit $rc): see $work/last.log; input saved in $work/findings/" >&2
    grep -E "^(==|SUMMARY|artifact_prefix|Test unit|fuzz invariant)" "$work/last.log" | head -n 20 >&2 || true
    ls -l "$work/findings/" >&2
    status=1
    summary+=("$t: FINDING after ${execs:-?} executions")
  else
    summary+=("$t: ${execs:-unknown} executions in ${per}s, no findings")
  fi
done
printf '%s\n' "${summary[@]}"
if [[ $status -ne 0 ]]; then exit 1; fi
echo "no findings"
