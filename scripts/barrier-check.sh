#!/usr/bin/env bash
# Shows which of the CUDA kernels' barriers the kernel tests would miss:
# leaves out each `__syncthreads()` / `__syncwarp()` call of
# worker/cuda/kernels/*.cuh in turn (STRATA_EMULATOR_DROP_BARRIER, read by
# tests/cuda/cuda_emulator.h) and runs the emulated kernel tests in each of
# the emulation's schedules (cuda_emulator.h Schedule), printing for each
# barrier the schedules whose tests failed without it. A barrier no
# schedule misses is either not needed or guards what the emulation cannot
# show (a handoff between blocks, which it runs one after another; a warp's
# reads before its own mma.sync, which it runs as a warp barrier):
# docs/gpu.md lists those. Not part of the test suite (a run of the kernel
# tests a barrier and schedule: about 20 minutes on 2 cores).
#
#   scripts/barrier-check.sh [BUILD] [FILE.cuh:LINE...]
#
# BUILD: a CUDA build (default build-cuda; strata_cuda_tests built there);
# FILE.cuh:LINE: only those barriers. Exits 2 on a bad argument, else 0: a
# barrier caught by no schedule is for the reader to judge (docs/gpu.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build-cuda"}
shift || true
tests="$build/tests/cuda/strata_cuda_tests"
if [[ ! -x "$tests" ]]; then
  echo "barrier-check: no $tests (build strata_cuda_tests with CUDA first)" >&2
  exit 2
fi
# The emulated instances of a kernel case: one a schedule.
mapfile -t schedules < <("$tests" --gtest_list_tests \
  --gtest_filter='On/Kernels.AMissingEntryIsInvalidArgument/emulated*' |
  sed -n 's/^ *AMissingEntryIsInvalidArgument\/\([a-z_]*\).*/\1/p')
if [[ $# -gt 0 ]]; then
  barriers=("$@")
  for at in "${barriers[@]}"; do
    file="$root/worker/cuda/kernels/${at%%:*}" line="${at##*:}"
    if [[ ! "$line" =~ ^[0-9]+$ || ! -f "$file" ]] ||
       ! sed -n "${line}p" "$file" | grep -q -E '__syncthreads\(\)|__syncwarp\(\)'; then
      echo "barrier-check: $at is no __syncthreads()/__syncwarp() call of worker/cuda/kernels" >&2
      exit 2
    fi
  done
else
  mapfile -t barriers < <(cd "$root/worker/cuda/kernels" &&
    grep -n -E '__syncthreads\(\)|__syncwarp\(\)' -- *.cuh | cut -d: -f1,2)
fi
uncaught=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for at in "${barriers[@]}"; do
  caught=()
  for s in "${schedules[@]}"; do
    if ! STRATA_EMULATOR_DROP_BARRIER="$at" "$tests" --gtest_filter="On/Kernels.*/$s" \
         > "$log" 2>&1; then
      caught+=("$s")
    fi
  done
  if [[ ${#caught[@]} -eq 0 ]]; then
    echo "$at  caught by no schedule"
    uncaught=$((uncaught + 1))
  else
    echo "$at  caught by ${caught[*]}"
  fi
done
echo "barrier-check: ${#barriers[@]} barriers, $uncaught caught by no schedule"
