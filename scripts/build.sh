#!/usr/bin/env bash
# Configures and builds strata. Usage: scripts/build.sh [BUILD_DIR] [cmake args...]
# STRATA_TARGETS="a b": build only those targets (default: everything).
# Default BUILD_DIR is build/ in the clone; ccache (under $STRATA_CACHE) makes
# rebuilds in a fresh clone fast.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BUILD_DIR="${1:-$STRATA_ROOT/build}"
shift || true
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
cmake -S "$STRATA_ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTRATA_MODELS_DIR="$STRATA_MODELS" -DSTRATA_PYTHON="$STRATA_VENV/bin/python" \
  "${launcher[@]}" "$@" >/dev/null
targets=()
if [[ -n "${STRATA_TARGETS:-}" ]]; then read -r -a targets <<<"$STRATA_TARGETS"; targets=(--target "${targets[@]}"); fi
cmake --build "$BUILD_DIR" -j "$STRATA_JOBS" "${targets[@]}"
