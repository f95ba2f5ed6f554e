#!/usr/bin/env bash
# Makes the models the engine tests hold to llama.cpp's committed outputs
# (tests/engine/data/*.json), idempotently, under $STRATA_MODELS:
#   requant/SmolLM2-135M-Instruct.TYPE.gguf  `strata quantize` of the default model
#   tiny/tiny-{qwen2,qwen3,gemma2,phi3,mixtral,qwen2moe,qwen3moe,olmoe,gpt-oss}.gguf
#                                            scripts/make_tiny_models.py (seeded)
#   tiny/tiny-{llama3,llama-linear,qwen2-yarn}.gguf  scripts/make_tiny_rope_models.py
# The tests check each file's SHA-256 against the one llama.cpp saw and skip,
# saying so, on a mismatch.  Usage: make-test-models.sh STRATA_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
strata="${1:?usage: make-test-models.sh STRATA_BINARY (build/client/cli/strata)}"
src="$STRATA_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$STRATA_MODELS/requant" "$STRATA_MODELS/tiny"
for type in Q8_0 Q4_0 Q4_K Q5_K Q6_K; do
  out="$STRATA_MODELS/requant/SmolLM2-135M-Instruct.$type.gguf"
  if [[ ! -f "$out" ]]; then
    log "making $out"
    "$strata" quantize "$src" "$out" "$type" >/dev/null
  fi
done
missing=0
for name in qwen2 qwen3 gemma2 phi3 mixtral qwen2moe qwen3moe olmoe gpt-oss; do
  [[ -f "$STRATA_MODELS/tiny/tiny-$name.gguf" ]] || missing=1
done
if [[ $missing == 1 ]]; then
  log "making tiny random-weight models"
  "$STRATA_VENV/bin/python" "$STRATA_ROOT/scripts/make_tiny_models.py" \
    --out "$STRATA_MODELS/tiny" --smollm2 "$src"
fi
if [[ ! -f "$STRATA_MODELS/tiny/tiny-qwen2-yarn.gguf" ]]; then
  log "making tiny RoPE-scaling models"
  "$STRATA_VENV/bin/python" "$STRATA_ROOT/scripts/make_tiny_rope_models.py" \
    --out "$STRATA_MODELS/tiny" --smollm2 "$src"
fi
