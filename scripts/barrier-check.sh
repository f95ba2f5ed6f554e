#!/usr/bin/env bash
# Shows which of the CUDA kernels' barriers and atomics the kernel tests
# would miss: leaves out each `__syncthreads()` / `__syncwarp()` call of
# worker/cuda/kernels/*.cuh in turn (STRATA_EMULATOR_DROP_BARRIER, read by
# tests/cuda/cuda_emulator.h) and runs the emulated kernel tests in each of
# the emulation's schedules (cuda_emulator.h Schedule) and under its race
# check (RaceCheckScope: `emulated_racecheck`), printing for each barrier
# those whose tests failed without it; then takes each `atomicAdd(` call
# for a plain read, add and write (STRATA_EMULATOR_PLAIN_ATOMIC) and runs
# the tests under the race check, the one check that can tell (the sums
# are the same here). A barrier nothing misses is either not needed or
# guards what the emulation cannot show (a handoff between blocks, which it
# runs one after another; a warp's reads before its own mma.sync, which it
# runs as a warp barrier), and an atomic nothing misses is on global memory,
# which the race check does not watch: docs/gpu.md lists those. Not part of
# the test suite (a run of the kernel tests a barrier and check: about 25
# minutes on 2 cores for all of them).
#
#   scripts/barrier-check.sh [BUILD] [FILE.cuh:LINE...]
#
# BUILD: a CUDA build (default build-cuda; strata_cuda_tests built there);
# FILE.cuh:LINE: only those barriers and atomics. Exits 2 on a bad argument,
# else 0: one caught by nothing is for the reader to judge (docs/gpu.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build-cuda"}
shift || true
tests="$build/tests/cuda/strata_cuda_tests"
if [[ ! -x "$tests" ]]; then
  echo "barrier-check: no $tests (build strata_cuda_tests with CUDA first)" >&2
  exit 2
fi
# The emulated instances of a kernel case: one a schedule, and the race check.
mapfile -t schedules < <("$tests" --gtest_list_tests \
  --gtest_filter='On/Kernels.AMissingEntryIsInvalidArgument/emulated*' |
  sed -n 's/^ *AMissingEntryIsInvalidArgument\/\([a-z_]*\).*/\1/p')
call='__syncthreads\(\)|__syncwarp\(\)|atomicAdd\('
if [[ $# -gt 0 ]]; then
  points=("$@")
  for at in "${points[@]}"; do
    file="$root/worker/cuda/kernels/${at%%:*}" line="${at##*:}"
    if [[ ! "$line" =~ ^[0-9]+$ || ! -f "$file" ]] ||
       ! sed -n "${line}p" "$file" | grep -q -E "$call"; then
      echo "barrier-check: $at is no __syncthreads()/__syncwarp()/atomicAdd( call of worker/cuda/kernels" >&2
      exit 2
    fi
  done
else
  mapfile -t points < <(cd "$root/worker/cuda/kernels" &&
    grep -n -E "$call" -- *.cuh | cut -d: -f1,2)
fi
uncaught=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for at in "${points[@]}"; do
  caught=()
  if sed -n "${at##*:}p" "$root/worker/cuda/kernels/${at%%:*}" | grep -q 'atomicAdd('; then
    if ! STRATA_EMULATOR_PLAIN_ATOMIC="$at" "$tests" \
         --gtest_filter="On/Kernels.*/emulated_racecheck" > "$log" 2>&1; then
      caught+=(emulated_racecheck)
    fi
    what="as a plain add"
  else
    for s in "${schedules[@]}"; do
      if ! STRATA_EMULATOR_DROP_BARRIER="$at" "$tests" --gtest_filter="On/Kernels.*/$s" \
           > "$log" 2>&1; then
        caught+=("$s")
      fi
    done
    what="left out"
  fi
  if [[ ${#caught[@]} -eq 0 ]]; then
    echo "$at  $what: caught by nothing"
    uncaught=$((uncaught + 1))
  else
    echo "$at  $what: caught by ${caught[*]}"
  fi
done
echo "barrier-check: ${#points[@]} barriers and atomics, $uncaught caught by nothing"
