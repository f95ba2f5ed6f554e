#!/usr/bin/env bash
# Installs every Debian package strata needs to build, test and fuzz.
# Idempotent: does nothing (and asks no registry) when all are present.
# Needs root (or sudo) on Debian 12.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev libabsl-dev
  libxbyak-dev libboost-dev libgtest-dev libgmock-dev libbenchmark-dev
  libyaml-cpp-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev
  libspdlog-dev libfmt-dev libcli11-dev libssl-dev
  clang-14 libfuzzer-14-dev libclang-rt-14-dev valgrind
  python3 python3-venv python3-pip
  iproute2 nftables   # the fault matrix's network-namespace black hole
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  log "all ${#PACKAGES[@]} Debian packages present"
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
log "installing: ${missing[*]}"
$SUDO apt-get update -q
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
