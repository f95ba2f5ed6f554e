#!/usr/bin/env bash
# The README's second command (and what .ci/run calls): installs everything,
# builds, and runs the whole test suite twice (plain build, then AddressSanitizer
# + UndefinedBehaviorSanitizer build; both replay the fuzz corpora), then
# replays the corpora under libFuzzer and fuzzes every target of tests/fuzz/
# for a bounded total time (STRATA_FUZZ_SECONDS, default 60, split across the
# targets; 0 skips it).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
"$STRATA_ROOT/scripts/install-deps.sh"
"$STRATA_ROOT/scripts/fetch-models.sh"
"$STRATA_ROOT/scripts/install-test-tools.sh"

status=0
log "plain build"
"$STRATA_ROOT/scripts/build.sh" "$STRATA_ROOT/build"
"$STRATA_ROOT/scripts/make-test-models.sh" "$STRATA_ROOT/build/client/cli/strata"
# CI time (2 cores, the suite within 30 minutes): the engine's agreement
# test runs the first two prompts per real model; STRATA_TEST_ALL=1 runs all 8.
if [[ "${STRATA_TEST_ALL:-0}" == 1 ]]; then export STRATA_ENGINE_ALL_CASES=1; fi
rm -f "$STRATA_ROOT/build/Testing/Temporary/LastTestsFailed.log"
ctest --test-dir "$STRATA_ROOT/build" --output-on-failure -j "$STRATA_JOBS" || status=1

# Tests labelled "heavy" (whole real models through Python) and the engine's
# agreement runs on the real SmolLM2/Gemma 3 weights (minutes each, several
# times that under ASan) run in the plain build only; the same code runs under
# the sanitizers on stories260K and the tiny random-weight models.
log "sanitizer build (ASan + UBSan, clang)"
# clang-14 (the fuzzer's compiler): with UBSan, GCC 12 took twice as long
# to compile (a file using CLI11: 35 s against clang's 18 s), and this build
# was the longest step of CI. A second compiler also sees other warnings.
# -O1 -g1: what the sanitizers need (line tables for their reports). The
# benchmarks are not built here: no test runs them. CUDA is off here
# (STRATA_CUDA=OFF) even where nvcc exists: cudart and NVRTC are closed
# libraries the sanitizers cannot instrument (their allocations at exit read
# as leaks), and the plain build above already builds and runs the CUDA code
# (where AUTO finds nvcc); this build checks the stub that says CUDA is absent.
"$STRATA_ROOT/scripts/build.sh" "$STRATA_ROOT/build-asan" -DSTRATA_SANITIZE=ON -DSTRATA_BUILD_BENCH=OFF -DSTRATA_CUDA=OFF \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
rm -f "$STRATA_ROOT/build-asan/Testing/Temporary/LastTestsFailed.log"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$STRATA_ROOT/build-asan" --output-on-failure -j "$STRATA_JOBS" -LE heavy \
  -E 'AgreementTest.*(smollm2|gemma3)' || status=1

fuzz_seconds="${STRATA_FUZZ_SECONDS:-60}"
if [[ "$fuzz_seconds" != 0 ]]; then
  log "fuzzing every target of tests/fuzz/ for ${fuzz_seconds}s in all"
  "$STRATA_ROOT/scripts/fuzz.sh" "$fuzz_seconds" || status=1
fi
# The failures again at the end, so the tail of a long CI log names them.
for dir in build build-asan; do
  failed="$STRATA_ROOT/$dir/Testing/Temporary/LastTestsFailed.log"
  if [[ -s "$failed" ]]; then
    log "failed in $dir:"
    sed 's/^/[strata]   /' "$failed" >&2
  fi
done
if [[ $status != 0 ]]; then log "FAILED (see the tests named above)"; else log "all passed"; fi
exit $status
