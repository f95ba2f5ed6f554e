#!/usr/bin/env bash
# scripts/build-llama-bench.sh refuses a bad mode before it downloads or
# builds anything: exit 2, the reason on stderr, no build folder made. Runs
# with STRATA_CACHE pointed at an empty temporary folder, so a cached build
# cannot answer for it.
set -u
script="$1"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
fail=0
for args in "bogus" "AVX2" "--help" "" "avx2 extra" "native native"; do
  # shellcheck disable=SC2086  # split the words of each case on purpose
  if [[ -z "$args" ]]; then set -- ""; else set -- $args; fi
  err="$(STRATA_CACHE="$cache" bash "$script" "$@" 2>&1 >/dev/null)"
  rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL: '$args' exited $rc, want 2"; fail=1; fi
  if [[ "$err" != *"unknown mode"* && "$err" != *"at most one argument"* ]]; then
    echo "FAIL: '$args' said: $err"; fail=1
  fi
done
if [[ -n "$(ls -A "$cache")" ]]; then echo "FAIL: the cache is not empty: $(ls -A "$cache")"; fail=1; fi
[[ $fail -eq 0 ]] && echo "ok: 6 bad invocations refused, nothing written"
exit $fail
