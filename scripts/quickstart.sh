#!/usr/bin/env bash
# The README's first command: installs everything, builds, fetches the default
# model and runs the main job on it: `strata run` generates text with the
# default model on the CPU (the cluster issue makes this a coordinator and
# workers).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
"$STRATA_ROOT/scripts/install-deps.sh"
"$STRATA_ROOT/scripts/fetch-models.sh"
"$STRATA_ROOT/scripts/build.sh" "$STRATA_ROOT/build"
"$STRATA_ROOT/build/client/cli/strata" run -m "$STRATA_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" \
  -p "${STRATA_PROMPT:-The three primary colors are}" -n "${STRATA_N:-64}"
