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
