#!/usr/bin/env bash
# The GPU check of issue 32, run from inside the bundle that
# scripts/gpu-bundle.sh makes, on the GPU machine (docs/gpu.md):
#
#   gpu-bundle/gpu-check.sh [RESULTS_DIR]      (default: ./check-results)
#
# Writes RESULTS_DIR/results.json (one object, below) and RESULTS_DIR/logs.tar.gz
# (every step's output). Steps, each bounded by `timeout`, the whole under
# 8 minutes (STRATA_CHECK_BUDGET_S, default 460):
#   device              nvidia-smi's name, driver and memory
#   read_bandwidth      bin/cuda-read-bandwidth: 16-byte loads over 4 GiB
#   bundle_runs         bin/strata --version from the bundle's libraries
#   tiny_models         py/make_tiny_models.py and make_tiny_rope_models.py
#                       make the tiny random-weight models (python3 with
#                       numpy and yaml); their SHA-256 against models/tiny.sha256
#   cuda_tests          bin/strata_cuda_tests (every kernel against the CPU
#                       reference; each test's outcome; after a kernel fault,
#                       which fails every later test of its process, or a
#                       hang (90 s without output), the tests it left
#                       undecided run again without it)
#   nccl_tests          bin/strata_nccl_tests (the NCCL link: one rank sending
#                       frames to itself; two ranks skip on one GPU)
#   switches            the kernel forms whose device tests failed are
#                       switched off (STRATA_WGMMA=0, ...) for every step
#                       after, so the rest is still measured
#   greedy_cpu          strata run --temp 0 on stories260K and each tiny model:
#                       the reference ids
#   greedy_cuda         the same with --backend cuda on stories260K: ids equal
#                       to greedy_cpu's (greedy_cuda_tiny: the tiny models,
#                       last, with what the budget leaves)
#   greedy_bisect       only when greedy_cuda's ids part: stories260K with
#                       every form off, then each alone; the one that gives
#                       the CPU's ids is switched off for the steps after
#                       (greedy_bisect_tiny: the same for the first tiny
#                       model whose ids part in greedy_cuda_tiny, last)
#   cluster_cpu         a coordinator + two CPU workers on loopback (plaintext,
#                       `insecure: true`) on stories260K: ids equal to greedy_cpu's
#   cluster_cuda_cpu    the same with worker 0 `backend: cuda:0`
#   cluster_cuda_cuda   the same with both workers `backend: cuda:0`: two
#                       workers on one GPU, which NCCL refuses, so
#                       `activation_link: auto` must link them over gRPC
#                       (`strata status`: link_to_next "grpc")
#   speed_cpu_smoke     strata speed on stories260K (the table's plumbing)
#   synth_8b            strata synth --shape llama-3-8b --type Q4_K_M (random
#                       weights, built-in byte-level tokenizer) on local disk
#   speed_cuda          strata speed --backend cuda on it: decode tok/s of one
#                       stream and of 16, pp512; as fractions of the measured
#                       bandwidth and of the tensor-core peak
#   kernel_profile      the same model's prefill and decode with every launch
#                       timed (STRATA_KERNEL_PROFILE): each kernel's share
#   speed_cuda_moe      a mixture's decode: the first 4 blocks of a
#                       Mixtral-8x7B-shaped Q4_K_M model (strata synth), one
#                       stream and 16, and with STRATA_MOE_SLOTS=0 and
#                       with STRATA_GRAPHS=0
# Every step is "pass", "fail" or "skip" with a reason; a step whose
# prerequisite is missing (no GPU, no CUDA backend in this build, no
# python3) is a skip that says which, never a pass.
#
# results.json:
#   {"schema": 1, "started_at", "finished_at", "seconds", "host",
#    "bundle": <bundle.json>, "gpu_present": bool, "cuda_backend": bool,
#    "switched_off": "STRATA_X ..." (the forms the steps after ran without),
#    "summary": {"pass": n, "fail": n, "skip": n},
#    "steps": [{"name", "status", "reason", "seconds", ...step fields}]}
# Exit status: 0 when no step failed, 1 otherwise.
#
# Environment: STRATA_CHECK_STALL_S (default 90: a test binary silent that
# long is stopped), STRATA_CHECK_WORK (scratch for models and logs, default
# /tmp/strata-gpu-check: the 8B model takes 4.58 GiB there), PYTHON
# (default python3), STRATA_CHECK_BUDGET_S.
# STRATA_CHECK_SELFTEST=1 checks this script on a machine without CUDA: the
# "CUDA" steps run on the CPU backend (no --backend flag, workers
# `backend: cpu`, the 8B model cut to 1 block, one timed run each) and
# results.json says "selftest": true. Its figures mean nothing.
# STRATA_CHECK_SELFTEST_BREAK=NAME (with the self-test) stands in for a form
# that parts the ids: the "CUDA" runs are one token short unless NAME=0, so
# greedy_bisect has something to find; STRATA_CHECK_SELFTEST_BREAK_MODEL=GLOB
# limits it to the models whose names match (greedy_bisect_tiny's case).
set -uo pipefail
BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RESULTS="${1:-$PWD/check-results}"
WORK="${STRATA_CHECK_WORK:-/tmp/strata-gpu-check}"
PYTHON="${PYTHON:-python3}"
BUDGET_S="${STRATA_CHECK_BUDGET_S:-460}"
mkdir -p "$RESULTS" "$WORK/models/tiny" "$WORK/logs"
RESULTS="$(cd "$RESULTS" && pwd)"
LOGS="$WORK/logs"
STEPS="$WORK/steps.jsonl"
: >"$STEPS"
# The bundle's libraries first; then CUDA's and the driver's where images
# keep them (the GPU machine's driver is a mount under /usr/local/nvidia).
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
export PATH="$PATH:/usr/local/nvidia/bin:/usr/local/cuda/bin"
export HOME="${HOME:-$WORK}"  # the tune caches go under $HOME/.cache/strata
STRATA="$BUNDLE/bin/strata"
started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
SECONDS=0
log() { printf '[gpu-check %3ds] %s\n' "$SECONDS" "$*" >&2; }

# --- JSON ----------------------------------------------------------------------
json_str() {
  local s
  s="$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')"
  s="${s//\\/\\\\}"; s="${s//\"/\\\"}"; s="${s//$'\n'/\\n}"; s="${s//$'\t'/\\t}"; s="${s//$'\r'/}"
  printf '"%s"' "$s"
}
# record NAME STATUS REASON SECONDS [EXTRA]: EXTRA is ', "key": value, ...'.
record() {
  printf '{"name": %s, "status": %s, "reason": %s, "seconds": %s%s}\n' \
    "$(json_str "$1")" "$(json_str "$2")" "$(json_str "$3")" "$4" "${5:-}" >>"$STEPS"
  log "$1: $2${3:+ ($3)}"
}
# The seconds left for a step: its own bound, or what the budget leaves.
bound() {
  local want="$1" left=$((BUDGET_S - SECONDS))
  ((left < 5)) && left=5
  ((want < left)) && echo "$want" || echo "$left"
}
over_budget() { ((SECONDS >= BUDGET_S - 5)); }
# The "ids" array of a strata --json object: "432,383,...".
json_ids() { grep -o '"ids":\[[0-9, ]*\]' "$1" | head -1 | sed 's/"ids":\[//; s/\]//; s/ //g'; }
json_num() { grep -o "\"$2\": *[-0-9.e+]*" "$1" | head -1 | sed 's/.*: *//'; }
first_diff() {  # index of the first differing id of two "a,b,c" lists
  local -a a b; IFS=, read -r -a a <<<"$1"; IFS=, read -r -a b <<<"$2"; local i
  for ((i = 0; i < ${#a[@]} || i < ${#b[@]}; i++)); do
    [[ "${a[i]:-}" != "${b[i]:-}" ]] && { echo "$i"; return; }
  done
  echo -1
}

# --- prerequisites --------------------------------------------------------------
bundle_json="$(cat "$BUNDLE/bundle.json" 2>/dev/null || echo null)"
gpu_present=false
gpu_reason="no CUDA device"
t0=$SECONDS
if command -v nvidia-smi >/dev/null; then
  if timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
      --format=csv,noheader >"$LOGS/nvidia-smi.txt" 2>&1 && [[ -s "$LOGS/nvidia-smi.txt" ]]; then
    gpu_present=true
    record device pass "" $((SECONDS - t0)) ", \"nvidia_smi\": $(json_str "$(cat "$LOGS/nvidia-smi.txt")")"
    log "device: $(head -1 "$LOGS/nvidia-smi.txt")"
  else
    gpu_reason="nvidia-smi lists no GPU: $(head -c 300 "$LOGS/nvidia-smi.txt")"
    record device skip "$gpu_reason" $((SECONDS - t0))
  fi
else
  gpu_reason="no nvidia-smi on PATH"
  record device skip "no nvidia-smi on PATH (the device is judged by cuda-read-bandwidth)" 0
fi

t0=$SECONDS
bw_gb_s=""
if [[ -x "$BUNDLE/bin/cuda-read-bandwidth" ]]; then
  timeout "$(bound 60)" "$BUNDLE/bin/cuda-read-bandwidth" --gib 4 --passes 10 \
    >"$LOGS/read-bandwidth.json" 2>&1
  rc=$?
  if [[ $rc == 0 ]]; then
    gpu_present=true
    bw_gb_s="$(json_num "$LOGS/read-bandwidth.json" median_gb_s)"
    record read_bandwidth pass "" $((SECONDS - t0)) ", \"result\": $(grep -m1 "^{" "$LOGS/read-bandwidth.json" || echo null)"
    log "read bandwidth: $bw_gb_s GB/s (median of 10 passes over 4 GiB; best $(json_num "$LOGS/read-bandwidth.json" best_gb_s))"
  elif [[ $gpu_present == true ]]; then
    record read_bandwidth fail "exit $rc: $(head -c 300 "$LOGS/read-bandwidth.json")" $((SECONDS - t0))
  else
    gpu_reason="$gpu_reason; cuda-read-bandwidth: $(head -c 300 "$LOGS/read-bandwidth.json")"
    record read_bandwidth skip "no CUDA device: $(head -c 300 "$LOGS/read-bandwidth.json")" $((SECONDS - t0))
  fi
else
  record read_bandwidth skip "bin/cuda-read-bandwidth not in the bundle (built without nvcc)" 0
fi

t0=$SECONDS
if timeout "$(bound 20)" "$STRATA" --version >"$LOGS/version.txt" 2>&1; then
  record bundle_runs pass "" $((SECONDS - t0)) ", \"version\": $(json_str "$(head -1 "$LOGS/version.txt")")"
else
  record bundle_runs fail "strata --version: $(head -c 400 "$LOGS/version.txt")" $((SECONDS - t0))
  # Nothing else can run; fall through so that results.json says so.
fi

# The CUDA backend: in this build (strata run takes --backend) and usable
# (a device).
cuda_backend=false
cuda_reason=""
if timeout 20 "$STRATA" run --help 2>&1 | grep -q -- '--backend'; then
  cuda_backend=true
else
  cuda_reason="this build has no CUDA backend (strata run has no --backend)"
fi
SELFTEST="${STRATA_CHECK_SELFTEST:-0}"
BACKEND_ARGS=(--backend cuda)   # strata run / speed on the GPU
WORKER_BACKEND=cuda:0           # worker 0 of the mixed cluster
SYNTH_ARGS=()                   # the whole 8B
RUNS=3
if [[ $SELFTEST == 1 ]]; then
  log "SELFTEST: the CUDA steps run on the CPU backend; their figures mean nothing"
  BACKEND_ARGS=() WORKER_BACKEND=cpu SYNTH_ARGS=(--blocks 1) RUNS=1
fi
cuda_skip_reason() {  # empty when the CUDA steps can run
  [[ ${SELFTEST:-0} == 1 ]] && return
  if [[ $cuda_backend != true ]]; then echo "$cuda_reason"
  elif [[ $gpu_present != true ]]; then echo "$gpu_reason"
  fi
}

# --- tiny models --------------------------------------------------------------------
cp "$BUNDLE/models/stories260K.gguf" "$WORK/models/"
t0=$SECONDS
tiny_ok=false
if ! command -v "$PYTHON" >/dev/null; then
  record tiny_models skip "no $PYTHON: the tiny models are made with numpy" 0
elif ! PYTHONPATH="$BUNDLE/py" "$PYTHON" -c 'import numpy, yaml, gguf' >"$LOGS/tiny-models.log" 2>&1; then
  record tiny_models skip "$PYTHON cannot import numpy, yaml and gguf: $(tail -c 300 "$LOGS/tiny-models.log")" $((SECONDS - t0))
else
  tok="$BUNDLE/models/smollm2-tokenizer.gguf"
  if (cd "$BUNDLE/py" &&
      PYTHONPATH="$BUNDLE/py" timeout "$(bound 90)" "$PYTHON" make_tiny_models.py --out "$WORK/models/tiny" --smollm2 "$tok" &&
      PYTHONPATH="$BUNDLE/py" timeout "$(bound 60)" "$PYTHON" make_tiny_rope_models.py --out "$WORK/models/tiny" --smollm2 "$tok") \
      >>"$LOGS/tiny-models.log" 2>&1; then
    tiny_ok=true
    same=0; total=0
    if [[ -s "$BUNDLE/models/tiny.sha256" ]]; then
      total="$(wc -l <"$BUNDLE/models/tiny.sha256")"
      same="$(cd "$WORK/models/tiny" && sha256sum -c "$BUNDLE/models/tiny.sha256" 2>/dev/null | grep -c ': OK$')"
    fi
    record tiny_models pass "" $((SECONDS - t0)) \
      ", \"models\": $(find "$WORK/models/tiny" -name '*.gguf' | wc -l), \"sha256_same_as_bundle_host\": $same, \"sha256_listed\": $total"
  else
    record tiny_models fail "$(tail -c 400 "$LOGS/tiny-models.log")" $((SECONDS - t0))
  fi
fi
models=("$WORK/models/stories260K.gguf")
if [[ $tiny_ok == true ]]; then
  for m in "$WORK"/models/tiny/tiny-*.gguf; do models+=("$m"); done
fi

# --- kernel and link tests -------------------------------------------------------------
# A kernel that faults (an illegal or misaligned address, an illegal
# instruction) leaves a sticky error on the process's CUDA context and every
# later test of that process fails with it; a crash or a hang runs none
# after it. So a run with a fault is followed by runs of the tests it left
# undecided, without the test that faulted, until one ends without a fault
# (at most 6 more, within the budget): the failures left are each a test's own.
STICKY_CUDA='illegal memory access|illegal instruction|misaligned address|unspecified launch failure|launch timed out|hardware stack error|illegal address|not supported on global/shared address space|uncorrectable ecc'
# A test binary that writes nothing for STALL_S seconds (a kernel that never
# returns: the host waits in a synchronize forever) is stopped there rather
# than at its bound, and the test it was in counts as crashed.
STALL_S="${STRATA_CHECK_STALL_S:-90}"
# run_watched BOUND LOG CMD...: CMD with its output in LOG, stopped (TERM,
# then KILL) when it runs past BOUND seconds or LOG stays the same size for
# STALL_S; returns 124 then, else CMD's status.
run_watched() {
  local bound_s="$1" log="$2"
  shift 2
  "$@" >"$log" 2>&1 &
  local pid=$! start=$SECONDS last=$SECONDS size=-1 now
  while kill -0 "$pid" 2>/dev/null; do
    now="$(stat -c %s "$log" 2>/dev/null || echo 0)"
    if [[ $now != "$size" ]]; then size=$now; last=$SECONDS; fi
    if ((SECONDS - start >= bound_s || SECONDS - last >= STALL_S)); then
      kill -TERM "$pid" 2>/dev/null
      sleep 2
      kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 1
  done
  wait "$pid"
}
# gtest_outcomes LOG: "STATUS NAME" a test, in the order they ran: ok,
# skipped, failed, faulted (the run's first test with a sticky CUDA error in
# its own output), crashed (started and never ended: the process died or was
# stopped in it).
gtest_outcomes() {
  awk -v sticky="$STICKY_CUDA" '
    function name_of(line) {
      sub(/^\[ *[A-Z]+ *\] /, "", line); sub(/, where .*/, "", line); sub(/ \([0-9]+ ms\)$/, "", line)
      return line
    }
    /^\[ RUN      \] / { cur = name_of($0); faulted = 0; next }
    /^\[       OK \] / { if (cur != "") print "ok", cur; cur = ""; next }
    /^\[  SKIPPED \] / { if (cur != "") print "skipped", cur; cur = ""; next }
    /^\[  FAILED  \] / {
      if (cur == "") next
      if (faulted && !fault_seen) { print "faulted", cur; fault_seen = 1 } else print "failed", cur
      cur = ""; next
    }
    cur != "" && tolower($0) ~ sticky { faulted = 1 }
    END { if (cur != "") print "crashed", cur }' "$1"
}
# decide_outcomes OUTCOMES FINAL: appends to FINAL what a run decided (all of
# it without a fault; with one, everything up to the fault and what passed
# or skipped after it) and prints the names it left undecided (failed after
# the fault). Returns 0 when the run had a fault.
decide_outcomes() {
  if ! grep -qE '^(faulted|crashed) ' "$1"; then cat "$1" >>"$2"; return 1; fi
  awk -v final="$2" '
    !after { print >>final; if ($1 == "faulted" || $1 == "crashed") after = 1; next }
    $1 == "ok" || $1 == "skipped" { print >>final; next }
    { print $2 }' "$1"
  return 0
}
# gtest_step NAME BINARY WHAT BOUND [GPU_FILTER [NO_GPU_FILTER]]: runs a gtest
# binary of the bundle (with the fault runs above) and records each test's
# outcome. Without a GPU it still runs (its device tests skip, saying why;
# its host checks must pass) and the step is a skip. Sets FAILED_TESTS
# ("name;name;...": what failed on its own) for the steps after.
FAILED_TESTS=""
gtest_step() {
  local name="$1" bin="$BUNDLE/bin/$2" what="$3" t0=$SECONDS rc
  FAILED_TESTS=""
  if [[ ! -x "$bin" ]]; then
    record "$name" skip "bin/$2 not in the bundle ($what not in this build)" 0
    return
  fi
  if over_budget; then record "$name" skip "the check's $BUDGET_S s budget was spent" 0; return; fi
  # With a GPU, $5 (a gtest filter) leaves out what needs none (checked
  # where the bundle was built), so the device's tests fit the bound;
  # without one, $6 (the device tests, which skip, and the host checks: the
  # emulated halves are the build machine's CI's).
  local filter=()
  [[ $gpu_present == true && -n "${5:-}" ]] && filter=("--gtest_filter=$5")
  [[ $gpu_present != true && -n "${6:-}" ]] && filter=("--gtest_filter=$6")
  run_watched "$(bound "$4")" "$LOGS/$name.log" "$bin" "${filter[@]}"
  rc=$?
  local final="$WORK/$name.final" round=0 undecided fault faults="" log="$LOGS/$name.log"
  : >"$final"
  gtest_outcomes "$log" >"$WORK/$name.outcomes"
  while undecided="$(decide_outcomes "$WORK/$name.outcomes" "$final")"; do
    fault="$(grep -m1 -E '^(faulted|crashed) ' "$WORK/$name.outcomes" | cut -d' ' -f2-)"
    faults+="$fault;"
    # Never ran: the binary's list less every test a run started.
    if [[ ! -s "$WORK/$name.all" ]]; then
      "$bin" --gtest_list_tests "${filter[@]}" 2>/dev/null |
        awk '/^[^ ]/ { suite = $1 } /^  [^ ]/ { print suite $1 }' >"$WORK/$name.all"
    fi
    undecided="$( { printf '%s\n' "$undecided"; grep -vxF -f <(cut -d' ' -f2- "$final" "$WORK/$name.outcomes") "$WORK/$name.all"; } |
                  grep -v '^$' | sort -u | paste -sd: -)"
    [[ -z "$undecided" ]] && break
    if ((round >= 6)) || over_budget; then
      tr ':' '\n' <<<"$undecided" | sed 's/^/undecided /' >>"$final"
      break
    fi
    round=$((round + 1))
    log="$LOGS/$name.again-$round.log"
    log "$name: a fault in $fault; running the $(tr ':' '\n' <<<"$undecided" | wc -l) tests it left undecided again"
    run_watched "$(bound "$4")" "$log" "$bin" "--gtest_filter=$undecided"
    rc=$?
    gtest_outcomes "$log" >"$WORK/$name.outcomes"
  done
  local n_tests n_fail n_skip failed again extra
  n_tests="$(wc -l <"$final")"
  n_skip="$(grep -c '^skipped ' "$final")"
  failed="$(grep -vE '^(ok|skipped) ' "$final" | cut -d' ' -f2- | head -40 | paste -sd';' -)"
  n_fail="$(grep -cvE '^(ok|skipped) ' "$final")"
  # Failed in the first run, passed in a later one: a fault's victims.
  again="$(gtest_outcomes "$LOGS/$name.log" | awk '$1 != "ok" && $1 != "skipped" { print $2 }' |
           grep -xF -f <(awk '$1 == "ok" { print $2 }' "$final") | head -40 | paste -sd';' -)"
  FAILED_TESTS="$failed"
  extra=", \"tests\": $n_tests, \"failures\": $n_fail, \"skipped\": $n_skip, \"failed\": $(json_str "$failed"), \"faults\": $(json_str "${faults%;}"), \"runs_after_faults\": $round, \"passed_when_run_again\": $(json_str "$again")"
  if ((n_fail > 0)); then
    record "$name" fail "$n_fail failed${faults:+ (faulted: ${faults%;})}: $(tail -c 300 "$log")" $((SECONDS - t0)) "$extra"
  elif [[ $rc == 124 ]]; then
    record "$name" fail "timed out" $((SECONDS - t0)) "$extra"
  elif [[ $rc != 0 ]]; then
    record "$name" fail "exit $rc: $(tail -c 300 "$log")" $((SECONDS - t0)) "$extra"
  elif [[ $gpu_present != true ]]; then
    record "$name" skip "$gpu_reason (the binary ran: $n_tests tests, $n_skip skipped, none failed)" \
      $((SECONDS - t0)) "$extra"
  elif grep -q 'no CUDA device' "$LOGS/$name.log"; then
    # The contract's skip message (GTEST_SKIP() << "no CUDA device: ..."):
    # a device test that did not see the GPU this machine has.
    record "$name" fail "tests skipped as if no GPU were here: $(grep -m1 'no CUDA device' "$LOGS/$name.log")" \
      $((SECONDS - t0)) "$extra"
  elif [[ "$n_tests" == "$n_skip" ]]; then
    record "$name" fail "every test skipped on a machine with a GPU: $(grep -m1 -A1 'Skipped' "$LOGS/$name.log" | tail -1)" \
      $((SECONDS - t0)) "$extra"
  else
    record "$name" pass "" $((SECONDS - t0)) "$extra"
  fi
}
# The device backend's tests find stories260K under $STRATA_SHARED_DIR/models
# and the tiny models under $STRATA_MODELS_DIR/tiny (tests/test_paths.h).
# On the GPU the emulated halves, the emulation's own tests and the
# NVRTC-only source tests (all run where the bundle was built) are left out.
STRATA_SHARED_DIR="$WORK" STRATA_MODELS_DIR="$WORK/models" \
  gtest_step cuda_tests strata_cuda_tests "the CUDA kernel and backend tests are" 200 \
  '-*/emulated:*emulated_*:DeviceBackendLaunches.*:DeviceBackendUpload.*:CudaEmulatorRaceCheck.*:CudaMatvecSource.*:CudaKernelSources.*:NvrtcCompilerTest.*' \
  '-*/emulated:*emulated_*'
CUDA_FAILED="$FAILED_TESTS"

# One rank sending to itself passes on one GPU; the two-rank test skips
# there (NCCL refuses two ranks on one GPU), saying so.
gtest_step nccl_tests strata_nccl_tests "the NCCL link is" 60

# --- kernel forms switched off -----------------------------------------------------------
# The forms the backend can do without (worker/cuda/cuda_backend.cc: NAME=0
# in its environment), narrowest first, each with the device tests that
# check it (an extended regular expression on their names). A form whose
# tests failed on their own is switched off for every step after, so that
# the greedy ids and the speed table still measure the rest; the
# "switches" step and results.json's "switched_off" say which and why.
FORMS=(
  "STRATA_ATTENTION_QUANTIZES:AttentionThatQuantizes"
  "STRATA_PDL:"
  "STRATA_ATTENTION_SPLIT:SplitDecodeAttention|DecodeContextsSplit|DecodeAttentionSplits"
  "STRATA_GRAPHS:Graph"
  "STRATA_MOE_SLOTS:ExpertSlots|AMixturesDecodeStep"
  "STRATA_MATVEC_MMA:MatvecMma"
  "STRATA_WGMMA:Wgmma"
  "STRATA_FLASH_ATTENTION:FlashAttention"
  "STRATA_MMA_INT8:MmaInt8|OnTheInt8TensorCores"
  "STRATA_MATVEC_INT8:MatvecInt8"
  "STRATA_MMA:Kernels\.Mma(Matches|Tokens)|TensorCoreSlices"
)
SWITCHED_OFF=()
switched_off() { [[ " ${SWITCHED_OFF[*]} " == *" $1 "* ]]; }
switch_off() { switched_off "$1" || { export "$1=0"; SWITCHED_OFF+=("$1"); }; }
t0=$SECONDS
why=""
for form in "${FORMS[@]}"; do
  var="${form%%:*}" re="${form#*:}"
  [[ -z "$re" ]] && continue
  hits="$(tr ';' '\n' <<<"$CUDA_FAILED" | grep -E "$re" | head -5 | paste -sd, -)"
  [[ -n "$hits" ]] && { switch_off "$var"; why+="$var=0 ($hits); "; }
done
record switches pass "${why:-every form on}" $((SECONDS - t0)) \
  ", \"switched_off\": \"${SWITCHED_OFF[*]}\", \"by\": \"device tests\""

# --- greedy ids: one process -----------------------------------------------------------
PROMPT="Once upon a time"
N_PREDICT=32
declare -A cpu_ids=()
# greedy_run MODEL LABEL OUTFILE [extra args]: strata run --json
greedy_run() {
  local model="$1" label="$2" out="$3" n="$N_PREDICT" brk="${STRATA_CHECK_SELFTEST_BREAK:-}"
  shift 3
  # The self-test's stand-in for a form that parts the ids from the CPU's:
  # STRATA_CHECK_SELFTEST_BREAK=NAME makes the "cuda" runs one token short
  # unless NAME=0 (only those of the models STRATA_CHECK_SELFTEST_BREAK_MODEL,
  # a glob of their names, matches, when set).
  local only="${STRATA_CHECK_SELFTEST_BREAK_MODEL:-*}"
  # shellcheck disable=SC2053  # a glob on purpose
  if [[ $SELFTEST == 1 && $label == cuda && -n "$brk" && "${!brk:-}" != 0 &&
        "$(basename "$model" .gguf)" == $only ]]; then
    n=$((n - 1))
  fi
  timeout "$(bound 60)" "$STRATA" run -m "$model" -p "$PROMPT" -n "$n" --temp 0 \
    --json "$@" >"$out" 2>"$out.err"
}
t0=$SECONDS
fails=""; per=""
over_budget && fails="the check's $BUDGET_S s budget was spent before this step; "
for m in "${models[@]}"; do
  name="$(basename "$m" .gguf)"
  if over_budget; then fails+="$name: not run; "; continue; fi
  if greedy_run "$m" cpu "$WORK/run-cpu-$name.json"; then
    cpu_ids[$name]="$(json_ids "$WORK/run-cpu-$name.json")"
    per+="${per:+, }$(json_str "$name"): \"${cpu_ids[$name]}\""
  else
    fails+="$name: exit $? $(tail -c 200 "$WORK/run-cpu-$name.json.err"); "
  fi
done
cat "$WORK"/run-cpu-*.json.err >"$LOGS/greedy-cpu.log" 2>/dev/null
if [[ -z "$fails" ]]; then
  record greedy_cpu pass "" $((SECONDS - t0)) ", \"ids\": {$per}"
else
  record greedy_cpu fail "$fails" $((SECONDS - t0)) ", \"ids\": {$per}"
fi

# greedy_cuda_step NAME MODEL...: strata run --backend cuda on each model,
# its ids against greedy_cpu's; FIRST_PARTED: the first model whose ids part.
FIRST_PARTED=""
greedy_cuda_step() {
  local step="$1" t0=$SECONDS skip fails="" per="" m name ids d
  shift
  skip="$(cuda_skip_reason)"
  if [[ -n "$skip" ]]; then record "$step" skip "$skip" 0; return; fi
  if (($# == 0)); then record "$step" skip "no models (see tiny_models)" 0; return; fi
  if over_budget; then record "$step" skip "the check's $BUDGET_S s budget was spent" 0; return; fi
  for m in "$@"; do
    name="$(basename "$m" .gguf)"
    if over_budget; then fails+="$name: not run, the budget was spent; "; continue; fi
    [[ -n "${cpu_ids[$name]:-}" ]] || { fails+="$name: no CPU ids to compare; "; continue; }
    if greedy_run "$m" cuda "$WORK/run-cuda-$name.json" "${BACKEND_ARGS[@]}"; then
      ids="$(json_ids "$WORK/run-cuda-$name.json")"
      d="$(first_diff "${cpu_ids[$name]}" "$ids")"
      per+="${per:+, }$(json_str "$name"): {\"first_difference\": $d, \"ids\": \"$ids\"}"
      if [[ $d != -1 ]]; then
        fails+="$name: ids differ from the CPU's at $d; "
        [[ -n "$FIRST_PARTED" ]] || FIRST_PARTED="$m"
      fi
    else
      fails+="$name: exit $? $(tail -c 200 "$WORK/run-cuda-$name.json.err"); "
    fi
  done
  cat "$WORK"/run-cuda-*.json.err >"$LOGS/$step.log" 2>/dev/null
  if [[ -z "$fails" ]]; then
    record "$step" pass "" $((SECONDS - t0)) ", \"models\": {$per}"
  else
    record "$step" fail "$fails" $((SECONDS - t0)) ", \"models\": {$per}"
  fi
}
# stories260K now; the tiny models (one NVRTC load each, perhaps slow)
# after the speed table, with what the budget leaves.
greedy_cuda_step greedy_cuda "${models[0]}"

# When the CUDA ids of stories260K part from the CPU's: which form parts
# them (bisect_forms).
greedy_same() {  # MODEL OUT: the CUDA ids of MODEL are the CPU's
  local name
  name="$(basename "$1" .gguf)"
  greedy_run "$1" cuda "$2" "${BACKEND_ARGS[@]}" && [[ "$(json_ids "$2")" == "${cpu_ids[$name]:-none}" ]]
}
# bisect_forms STEP MODEL: MODEL's CUDA ids again with every form still on
# switched off, then with each alone (narrowest first); the first alone that
# gives the CPU's ids is switched off for the steps after (every one, if
# only all together do). Recorded as STEP.
bisect_forms() {
  local step="$1" model="$2" t0=$SECONDS name v form per="" candidates=() fixes=()
  name="$(basename "$model" .gguf)"
  if [[ -z "${cpu_ids[$name]:-}" ]]; then record "$step" skip "no CPU ids of $name" 0; return; fi
  for form in "${FORMS[@]}"; do switched_off "${form%%:*}" || candidates+=("${form%%:*}"); done
  if ! (for v in "${candidates[@]}"; do export "$v=0"; done
        greedy_same "$model" "$WORK/bisect-$name-all.json"); then
    record "$step" fail "$name: the ids part from the CPU's with every form off too: not one of the forms the switches name" \
      $((SECONDS - t0)) ", \"model\": $(json_str "$name"), \"same_ids_with_off\": {\"all\": false}"
    return
  fi
  per="\"all\": true"
  for v in "${candidates[@]}"; do
    if over_budget; then per+=", \"$v\": null"; continue; fi
    if (export "$v=0"; greedy_same "$model" "$WORK/bisect-$name-$v.json"); then
      per+=", \"$v\": true"; fixes+=("$v")
    else
      per+=", \"$v\": false"
    fi
  done
  if ((${#fixes[@]} > 0)); then
    switch_off "${fixes[0]}"
    record "$step" pass "$name: ${fixes[0]}=0 gives the CPU's ids; switched off for the steps after" \
      $((SECONDS - t0)) ", \"model\": $(json_str "$name"), \"same_ids_with_off\": {$per}, \"switched_off\": \"${fixes[0]}\""
  else
    for v in "${candidates[@]}"; do switch_off "$v"; done
    record "$step" pass "$name: only every form off together gives the CPU's ids; all switched off for the steps after" \
      $((SECONDS - t0)) ", \"model\": $(json_str "$name"), \"same_ids_with_off\": {$per}, \"switched_off\": \"${candidates[*]}\""
  fi
}
if [[ -n "$FIRST_PARTED" ]]; then
  bisect_forms greedy_bisect "$FIRST_PARTED"
fi

# --- greedy ids: a loopback cluster -----------------------------------------------------
# Plaintext links (`insecure: true`, loopback only) and an explicit split of
# stories260K's 5 blocks: worker 0 [0, 3) with BACKEND0, worker 1 [3, 5) on
# the CPU. Ports from the process id, so two checks do not collide.
pids=()
stop_cluster() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
}
trap stop_cluster EXIT
# cluster NAME BACKEND0: writes $WORK/NAME-generate.json; returns non-zero
# with the reason in $cluster_error.
cluster_error=""
cluster() {  # NAME BACKEND0 [BACKEND1 (cpu)]
  local name="$1" backend0="$2" base=$((20000 + ($$ % 2000) * 20))
  [[ $name == cluster_cuda_cpu ]] && base=$((base + 5))
  [[ $name == cluster_cuda_cuda ]] && base=$((base + 10))
  local dir="$WORK/$name" i
  mkdir -p "$dir"
  local backends=("$backend0" "${3:-cpu}")
  for i in 0 1; do
    cat >"$dir/worker-$i.yaml" <<EOF
listen: 127.0.0.1:$((base + 1 + i))
backend: ${backends[i]}
threads: 2
memory_budget: 4GiB
model_dirs: [$WORK/models]
name: w$i
insecure: true
EOF
  done
  cat >"$dir/cluster.yaml" <<EOF
model: $WORK/models/stories260K.gguf
listen: 127.0.0.1:$base
http_listen: "off"
context_length: 256
max_sequences: 4
placement: explicit
insecure: true
workers:
  - address: 127.0.0.1:$((base + 1))
    name: w0
    blocks: [0, 3]
  - address: 127.0.0.1:$((base + 2))
    name: w1
    blocks: [3, 5]
EOF
  for i in 0 1; do
    "$BUNDLE/bin/strata-worker" --config "$dir/worker-$i.yaml" >"$LOGS/$name-worker-$i.log" 2>&1 &
    pids+=("$!")
  done
  "$BUNDLE/bin/strata-coordinator" --config "$dir/cluster.yaml" >"$LOGS/$name-coordinator.log" 2>&1 &
  pids+=("$!")
  # The coordinator answers once every shard has loaded; until then a
  # generate is refused. Try for at most 60 s.
  local roles=(worker-0 worker-1 coordinator)
  local deadline=$((SECONDS + $(bound 60))) rc=1
  while ((SECONDS < deadline)); do
    for i in "${!pids[@]}"; do
      if ! kill -0 "${pids[i]}" 2>/dev/null; then
        cluster_error="${roles[i]} exited: $(tail -c 300 "$LOGS/$name-${roles[i]}.log")"
        stop_cluster; return 1
      fi
    done
    if timeout 30 "$STRATA" generate --server "127.0.0.1:$base" -p "$PROMPT" -n "$N_PREDICT" \
        --temp 0 --json >"$WORK/$name-generate.json" 2>"$WORK/$name-generate.err"; then
      # Which link each stage has (grpc, nccl), for the record.
      timeout 30 "$STRATA" status --server "127.0.0.1:$base" --json \
        >"$WORK/$name-status.json" 2>/dev/null
      rc=0; break
    fi
    sleep 0.5
  done
  cp "$WORK/$name-generate.err" "$LOGS/" 2>/dev/null
  stop_cluster
  if [[ $rc != 0 ]]; then
    cluster_error="no answer in time: $(tail -c 300 "$WORK/$name-generate.err")"
  fi
  return $rc
}
check_cluster() {  # NAME BACKEND0 [BACKEND1 [LINKS: the link_to_next values wanted]]
  local name="$1" t0=$SECONDS ids d links
  if over_budget; then record "$name" skip "the check's $BUDGET_S s budget was spent" 0; return; fi
  local want="${cpu_ids[stories260K]:-}"
  if [[ -z "$want" ]]; then record "$name" fail "no CPU ids of stories260K to compare" 0; return; fi
  if cluster "$name" "$2" "${3:-cpu}"; then
    ids="$(json_ids "$WORK/$name-generate.json")"
    d="$(first_diff "$want" "$ids")"
    links="$(grep -o '"link_to_next":"[^"]*"' "$WORK/$name-status.json" 2>/dev/null |
             sed 's/.*:"//; s/"$//' | paste -sd, -)"
    if [[ $d == -1 && -n "${4:-}" && "$links" != "$4" ]]; then
      record "$name" fail "links between the stages are [$links], expected [$4]" \
        $((SECONDS - t0)) ", \"ids\": \"$ids\", \"links\": \"$links\""
    elif [[ $d == -1 ]]; then
      record "$name" pass "" $((SECONDS - t0)) ", \"ids\": \"$ids\", \"links\": \"$links\""
    else
      record "$name" fail "ids differ from one-process CPU's at $d" $((SECONDS - t0)) ", \"ids\": \"$ids\", \"cpu_ids\": \"$want\""
    fi
  else
    record "$name" fail "$cluster_error" $((SECONDS - t0))
  fi
}
check_cluster cluster_cpu cpu
skip="$(cuda_skip_reason)"
if [[ -n "$skip" ]]; then
  record cluster_cuda_cpu skip "$skip" 0
else
  check_cluster cluster_cuda_cpu "$WORKER_BACKEND"
fi
if [[ -n "$skip" ]]; then
  record cluster_cuda_cuda skip "$skip" 0
else
  # Both on GPU 0: gRPC between them, never NCCL (the last stage has none).
  check_cluster cluster_cuda_cuda "$WORKER_BACKEND" "$WORKER_BACKEND" "grpc,"
fi

# --- speed -------------------------------------------------------------------------------
t0=$SECONDS
if timeout "$(bound 60)" "$STRATA" speed -m "$WORK/models/stories260K.gguf" -p 64 -n 16 -r 1 \
    --json >"$WORK/speed-cpu.json" 2>"$LOGS/speed-cpu.log"; then
  record speed_cpu_smoke pass "" $((SECONDS - t0)) \
    ", \"pp64_tok_s\": $(grep -o '"pp":{[^}]*' "$WORK/speed-cpu.json" | grep -o '"tok_s":[-0-9.e+]*' | sed 's/.*://' || echo null), \"tg16_tok_s\": $(grep -o '"tg":{[^}]*' "$WORK/speed-cpu.json" | grep -o '"tok_s":[-0-9.e+]*' | sed 's/.*://' || echo null)"
else
  record speed_cpu_smoke fail "$(tail -c 300 "$LOGS/speed-cpu.log")" $((SECONDS - t0))
fi

skip="$(cuda_skip_reason)"
if [[ -z "$skip" && $SELFTEST != 1 ]] && ! timeout 20 "$STRATA" speed --help 2>&1 | grep -q -- '--backend'; then
  skip="strata speed has no --backend in this build"
fi
if [[ -z "$skip" ]] && over_budget; then skip="the check's $BUDGET_S s budget was spent"; fi
m8b="$WORK/models/llama-3-8b-Q4_K_M${SYNTH_ARGS[*]:+-selftest}.gguf"
t0=$SECONDS
if [[ -n "$skip" ]]; then
  record synth_8b skip "$skip (nothing to measure it with)" 0
elif [[ -f "$m8b" ]]; then
  record synth_8b pass "already there" 0
elif timeout "$(bound 120)" "$STRATA" synth --shape llama-3-8b --type Q4_K_M -o "$m8b" "${SYNTH_ARGS[@]}" \
    >"$LOGS/synth-8b.log" 2>&1; then
  record synth_8b pass "" $((SECONDS - t0)) ", \"report\": $(json_str "$(tail -1 "$LOGS/synth-8b.log")")"
else
  record synth_8b fail "$(tail -c 300 "$LOGS/synth-8b.log")" $((SECONDS - t0))
  skip="the 8B model was not written"
fi
# pp/tg fields of a strata speed --json object.
speed_field() { grep -o "\"$2\":{[^}]*" "$1" | grep -o '"tok_s":[-0-9.e+]*' | sed 's/.*://'; }
# speed NAME BOUND MODEL ARGS...: strata speed --json of MODEL on the
# device (BACKEND_ARGS) into $WORK/speed-NAME.json, its stderr into
# logs/speed-NAME.log, within BOUND seconds of the budget; its status.
speed() {
  local name="$1" b="$2" model="$3"
  shift 3
  timeout "$(bound "$b")" "$STRATA" speed -m "$model" "${BACKEND_ARGS[@]}" "$@" --json \
    >"$WORK/speed-$name.json" 2>"$LOGS/speed-$name.log"
}
t0=$SECONDS
if [[ -n "$skip" ]]; then
  record speed_cuda skip "$skip" 0
else
  ok=true
  speed 1 150 "$m8b" -p 512 -n 128 -r "$RUNS" || ok=false
  speed 16 90 "$m8b" -p 0 -n 64 -r "$RUNS" --sessions 16 || ok=false
  # The tuner (on above) picks each matrix shape's tensor-core form for
  # prompts, the fastest on its device; each form alone, untuned
  # (STRATA_NO_TUNE=1: the first form the switches allow): the int8 kernel,
  # the f16 one (on an sm_90 device the warpgroup (wgmma) kernel's) and
  # the f16 one on mma.sync's. A failure here is left in the figures, not
  # the step.
  STRATA_NO_TUNE=1 speed i8 90 "$m8b" -p 512 -n 0 -r "$RUNS" || true
  STRATA_NO_TUNE=1 STRATA_MMA_INT8=0 speed f16 90 "$m8b" -p 512 -n 0 -r "$RUNS" || true
  STRATA_NO_TUNE=1 STRATA_MMA_INT8=0 STRATA_WGMMA=0 speed f16-mma 90 "$m8b" -p 512 -n 0 -r "$RUNS" || true
  # The 16 sequences with their 8- and 16-column chunks on dp4a, not the
  # tensor cores (the same bits; the tensor-core form's comparison).
  STRATA_MATVEC_MMA=0 speed 16-dp4a 90 "$m8b" -p 0 -n 64 -r "$RUNS" --sessions 16 || true
  # The same decode on the float matvec kernel (the int8 one's comparison).
  STRATA_MATVEC_INT8=0 speed float 90 "$m8b" -p 0 -n 128 -r "$RUNS" || true
  # And without programmatic dependent launch (each kernel launched after
  # the one before ends).
  STRATA_PDL=0 speed nopdl 90 "$m8b" -p 0 -n 128 -r "$RUNS" || true
  # Decode after 4096 tokens of context, its attention split over blocks
  # and not (STRATA_ATTENTION_SPLIT=0: one block a head).
  speed d4096 60 "$m8b" -d 4096 -p 0 -n 64 -r 2 || true
  STRATA_ATTENTION_SPLIT=0 speed d4096-unsplit 60 "$m8b" -d 4096 -p 0 -n 64 -r 2 || true
  pp="$(speed_field "$WORK/speed-1.json" pp)"; tg1="$(speed_field "$WORK/speed-1.json" tg)"
  tg_d="$(speed_field "$WORK/speed-d4096.json" tg)"
  tg_du="$(speed_field "$WORK/speed-d4096-unsplit.json" tg)"
  tg16="$(speed_field "$WORK/speed-16.json" tg)"
  tg16_dp4a="$(speed_field "$WORK/speed-16-dp4a.json" tg)"
  pp_i8="$(speed_field "$WORK/speed-i8.json" pp)"
  pp_f16="$(speed_field "$WORK/speed-f16.json" pp)"
  pp_f16_mma="$(speed_field "$WORK/speed-f16-mma.json" pp)"
  tg_float="$(speed_field "$WORK/speed-float.json" tg)"
  tg_nopdl="$(speed_field "$WORK/speed-nopdl.json" tg)"
  bytes="$(json_num "$WORK/speed-1.json" decode_weight_bytes)"
  # Matmul weights of the Llama-3-8B shape (32 blocks of q, k, v, o, gate,
  # up, down, and the 128256-row head): 2 flop per weight per token.
  flop_per_token=15.01e9
  # The device's dense tensor-core peaks by NVIDIA's datasheets, f16/bf16
  # TFLOP/s and int8 TOP/s (Q4_K_M's prompt matrices run on the int8 kernel
  # unless the tuner finds an f16 form faster: prefill_forms): H100 SXM and
  # H200 989 and 1979, H100 NVL 835 and 1671, H100 PCIe 756 and 1513, A100
  # 312 and 624. Another device: no peak, its fractions null.
  device_name="$(head -1 "$LOGS/nvidia-smi.txt" 2>/dev/null | cut -d, -f1)"
  [[ -n "$device_name" ]] || device_name="$(grep -o '"device": "[^"]*"' "$LOGS/read-bandwidth.json" 2>/dev/null | head -1 | sed 's/.*: "//; s/"$//')"
  case "$device_name" in
    *H100*PCIe*) peak_tflops=756 peak_int8_tops=1513 ;;
    *H100*NVL*) peak_tflops=835 peak_int8_tops=1671 ;;
    *H100* | *H200*) peak_tflops=989 peak_int8_tops=1979 ;;
    *A100*) peak_tflops=312 peak_int8_tops=624 ;;
    *) peak_tflops=0 peak_int8_tops=0 ;;
  esac
  ratios="$(awk -v pp="${pp:-0}" -v tg1="${tg1:-0}" -v tg16="${tg16:-0}" -v b="${bytes:-0}" \
    -v bw="${bw_gb_s:-0}" -v f="$flop_per_token" -v peak="$peak_tflops" -v peak8="$peak_int8_tops" \
    -v ppi="${pp_i8:-0}" -v ppf="${pp_f16:-0}" -v ppm="${pp_f16_mma:-0}" -v tgd="${tg16_dp4a:-0}" -v tgf="${tg_float:-0}" -v tgn="${tg_nopdl:-0}" \
    -v tgdd="${tg_d:-0}" -v tgdu="${tg_du:-0}" 'BEGIN {
      printf "\"decode_gb_s\": %.1f, ", tg1 * b / 1e9;
      printf "\"decode_fraction_of_read_bandwidth\": %s, ", (bw > 0 ? sprintf("%.3f", tg1 * b / 1e9 / bw) : "null");
      printf "\"sixteen_over_one\": %s, ", (tg1 > 0 ? sprintf("%.2f", tg16 / tg1) : "null");
      printf "\"decode16_dp4a_tok_s\": %s, ", (tgd > 0 ? tgd : "null");
      printf "\"mma_over_dp4a_decode16\": %s, ", (tgd > 0 ? sprintf("%.2f", tg16 / tgd) : "null");
      printf "\"prefill_tflops\": %.1f, ", pp * f / 1e12;
      printf "\"tensor_peaks\": %s, ", (peak > 0 ? sprintf("{\"f16_tflops\": %d, \"int8_tops\": %d}", peak, peak8) : "null");
      printf "\"prefill_fraction_of_f16_peak\": %s, ", (peak > 0 ? sprintf("%.3f", pp * f / 1e12 / peak) : "null");
      printf "\"prefill_fraction_of_int8_peak\": %s, ", (peak8 > 0 ? sprintf("%.3f", pp * f / 1e12 / peak8) : "null");
      printf "\"pp512_int8_kernel_tok_s\": %s, ", (ppi > 0 ? ppi : "null");
      printf "\"tuned_over_int8_prefill\": %s, ", (ppi > 0 ? sprintf("%.2f", pp / ppi) : "null");
      printf "\"pp512_f16_kernel_tok_s\": %s, ", (ppf > 0 ? ppf : "null");
      printf "\"int8_over_f16_prefill\": %s, ", (ppi > 0 && ppf > 0 ? sprintf("%.2f", ppi / ppf) : "null");
      printf "\"f16_kernel_fraction_of_f16_peak\": %s, ", (ppf > 0 && peak > 0 ? sprintf("%.3f", ppf * f / 1e12 / peak) : "null");
      printf "\"pp512_f16_mma_sync_tok_s\": %s, ", (ppm > 0 ? ppm : "null");
      printf "\"wgmma_over_mma_sync_prefill\": %s, ", (ppm > 0 ? sprintf("%.2f", ppf / ppm) : "null");
      printf "\"tg128_float_kernel_tok_s\": %s, ", (tgf > 0 ? tgf : "null");
      printf "\"int8_over_float_decode\": %s, ", (tgf > 0 ? sprintf("%.2f", tg1 / tgf) : "null");
      printf "\"tg128_no_pdl_tok_s\": %s, ", (tgn > 0 ? tgn : "null");
      printf "\"pdl_over_plain_decode\": %s, ", (tgn > 0 ? sprintf("%.2f", tg1 / tgn) : "null");
      printf "\"decode_d4096_tok_s\": %s, ", (tgdd > 0 ? tgdd : "null");
      printf "\"decode_d4096_unsplit_tok_s\": %s, ", (tgdu > 0 ? tgdu : "null");
      printf "\"split_over_unsplit_decode_d4096\": %s", (tgdu > 0 ? sprintf("%.2f", tgdd / tgdu) : "null") }')"
  # The tuner's forms for prompts: "shape": fastest form, from its file.
  forms="$("$PYTHON" -c 'import json, sys
p = json.load(open(sys.argv[1])).get("prefill", {})
print(json.dumps({s: min(t, key=t.get) for s, t in p.items() if t}))' \
    "$HOME/.cache/strata/cuda-tuner.json" 2>/dev/null || echo null)"
  extra=", \"prefill_forms\": ${forms:-null}, \"decode_tok_s\": ${tg1:-null}, \"decode16_tok_s\": ${tg16:-null}, \"pp512_tok_s\": ${pp:-null}, \"decode_weight_bytes\": ${bytes:-null}, \"read_bandwidth_gb_s\": ${bw_gb_s:-null}, $ratios, \"targets\": {\"decode_fraction_of_read_bandwidth\": 0.75, \"sixteen_over_one\": 8, \"prefill_fraction_of_peak\": 0.5}"
  log "speed (Llama-3-8B Q4_K_M): decode ${tg1:-?} tok/s, 16 streams ${tg16:-?} tok/s, pp512 ${pp:-?} tok/s; ${ratios//\"/}"
  if [[ $ok == true && -n "$tg1" && -n "$pp" && -n "$tg16" ]]; then
    # The table is a measurement: pass means measured; the targets beside it.
    record speed_cuda pass "measured (targets in \"targets\")" $((SECONDS - t0)) "$extra"
  else
    record speed_cuda fail "$(tail -c 300 "$LOGS/speed-1.log") $(tail -c 200 "$LOGS/speed-16.log")" $((SECONDS - t0)) "$extra"
  fi
fi

# Where the time goes (diagnostics for the next kernel work): the same 8B
# model's prefill and decode with every launch timed (STRATA_KERNEL_PROFILE:
# the host waits for each launch and graphs are off, so its totals exceed
# the speed table's); each kernel's launches and time, most time first.
t0=$SECONDS
if [[ -z "$skip" ]] && over_budget; then skip="the check's $BUDGET_S s budget was spent"; fi
if [[ -n "$skip" ]]; then
  record kernel_profile skip "$skip" 0
else
  ok=true
  for part in prefill decode; do
    rm -f "$WORK/kernels-$part.json"
    if [[ $part == prefill ]]; then args=(-p 512 -n 0); else args=(-p 0 -n 32 --sessions 4); fi
    STRATA_KERNEL_PROFILE="$WORK/kernels-$part.json" timeout "$(bound 60)" "$STRATA" speed -m "$m8b" \
      "${BACKEND_ARGS[@]}" "${args[@]}" -r 1 --json >"$WORK/speed-profile-$part.json" \
      2>"$LOGS/kernel-profile-$part.log" || ok=false
    # (The CPU backend of the self-test times no launches: no file.)
    [[ $SELFTEST == 1 || -s "$WORK/kernels-$part.json" ]] || ok=false
  done
  profile_json() { if [[ -s "$1" ]]; then tr -d '\n' <"$1"; else echo null; fi; }
  extra=", \"prefill_512\": $(profile_json "$WORK/kernels-prefill.json"), \"decode_4x32\": $(profile_json "$WORK/kernels-decode.json")"
  if [[ $ok == true ]]; then
    record kernel_profile pass "measured" $((SECONDS - t0)) "$extra"
  else
    record kernel_profile fail "$(tail -c 300 "$LOGS/kernel-profile-prefill.log") $(tail -c 200 "$LOGS/kernel-profile-decode.log")" \
      $((SECONDS - t0)) "$extra"
  fi
fi

# A mixture's decode: the first 4 blocks of a Mixtral-8x7B-shaped Q4_K_M
# model (8 experts, 2 a token; 3.6 GB), one stream and 16, and one stream
# with STRATA_MOE_SLOTS=0 (each used expert's rows gathered, a launch
# each, the experts' ids downloaded each block) and with STRATA_GRAPHS=0
# (the slots' step launched kernel by kernel, not replayed from a graph);
# decode_weight_bytes counts the 2 experts used of 8.
t0=$SECONDS
moe_skip="$(cuda_skip_reason)"
if [[ -z "$moe_skip" ]] && over_budget; then moe_skip="the check's $BUDGET_S s budget was spent"; fi
mmoe="$WORK/models/mixtral-8x7b-Q4_K_M-4${SYNTH_ARGS[*]:+-selftest}.gguf"
moe_blocks=4
[[ $SELFTEST == 1 ]] && moe_blocks=1
if [[ -n "$moe_skip" ]]; then
  record speed_cuda_moe skip "$moe_skip" 0
elif ! [[ -f "$mmoe" ]] && ! timeout "$(bound 90)" "$STRATA" synth --shape mixtral-8x7b --type Q4_K_M \
    --blocks "$moe_blocks" -o "$mmoe" >"$LOGS/synth-moe.log" 2>&1; then
  record speed_cuda_moe fail "synth: $(tail -c 300 "$LOGS/synth-moe.log")" $((SECONDS - t0))
else
  ok=true
  speed moe-1 60 "$mmoe" -p 0 -n 64 -r "$RUNS" || ok=false
  speed moe-16 60 "$mmoe" -p 0 -n 32 -r "$RUNS" --sessions 16 || ok=false
  STRATA_MOE_SLOTS=0 speed moe-gathered 60 "$mmoe" -p 0 -n 64 -r "$RUNS" || true
  STRATA_GRAPHS=0 speed moe-launched 60 "$mmoe" -p 0 -n 64 -r "$RUNS" || true
  m1="$(speed_field "$WORK/speed-moe-1.json" tg)"; m16="$(speed_field "$WORK/speed-moe-16.json" tg)"
  mg="$(speed_field "$WORK/speed-moe-gathered.json" tg)"
  ml="$(speed_field "$WORK/speed-moe-launched.json" tg)"
  mbytes="$(json_num "$WORK/speed-moe-1.json" decode_weight_bytes)"
  ratios="$(awk -v m1="${m1:-0}" -v m16="${m16:-0}" -v mg="${mg:-0}" -v ml="${ml:-0}" -v b="${mbytes:-0}" -v bw="${bw_gb_s:-0}" 'BEGIN {
      printf "\"moe_decode_gb_s\": %.1f, ", m1 * b / 1e9;
      printf "\"moe_decode_fraction_of_read_bandwidth\": %s, ", (bw > 0 ? sprintf("%.3f", m1 * b / 1e9 / bw) : "null");
      printf "\"moe_sixteen_over_one\": %s, ", (m1 > 0 ? sprintf("%.2f", m16 / m1) : "null");
      printf "\"moe_decode_gathered_tok_s\": %s, ", (mg > 0 ? mg : "null");
      printf "\"slots_over_gathered_moe_decode\": %s, ", (mg > 0 ? sprintf("%.2f", m1 / mg) : "null");
      printf "\"graphs_over_launched_moe_decode\": %s", (ml > 0 ? sprintf("%.2f", m1 / ml) : "null") }')"
  extra=", \"blocks\": $moe_blocks, \"moe_decode_tok_s\": ${m1:-null}, \"moe_decode16_tok_s\": ${m16:-null}, \"decode_weight_bytes\": ${mbytes:-null}, $ratios"
  log "speed (Mixtral-8x7B Q4_K_M, $moe_blocks blocks): decode ${m1:-?} tok/s, 16 streams ${m16:-?} tok/s; ${ratios//\"/}"
  if [[ $ok == true && -n "$m1" && -n "$m16" ]]; then
    record speed_cuda_moe pass "measured" $((SECONDS - t0)) "$extra"
  else
    record speed_cuda_moe fail "$(tail -c 300 "$LOGS/speed-moe-1.log") $(tail -c 200 "$LOGS/speed-moe-16.log")" \
      $((SECONDS - t0)) "$extra"
  fi
fi

FIRST_PARTED=""
greedy_cuda_step greedy_cuda_tiny "${models[@]:1}"
# The first tiny model whose ids part, bisected the same way (for the
# record: the steps a switch would help have run).
if [[ -n "$FIRST_PARTED" ]] && ! over_budget; then
  bisect_forms greedy_bisect_tiny "$FIRST_PARTED"
fi

# --- results --------------------------------------------------------------------------------
n_pass="$(grep -c '"status": "pass"' "$STEPS")"
n_fail="$(grep -c '"status": "fail"' "$STEPS")"
n_skip="$(grep -c '"status": "skip"' "$STEPS")"
{
  printf '{"schema": 1, "started_at": "%s", "finished_at": "%s", "seconds": %d,\n' \
    "$started_at" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$SECONDS"
  printf ' "host": %s, "bundle": %s,\n' "$(json_str "$(uname -nrm)")" "$bundle_json"
  printf ' "selftest": %s,\n' "$([[ $SELFTEST == 1 ]] && echo true || echo false)"
  printf ' "switched_off": "%s",\n' "${SWITCHED_OFF[*]}"
  printf ' "gpu_present": %s, "gpu_reason": %s, "cuda_backend": %s,\n' "$gpu_present" \
    "$(json_str "$([[ $gpu_present == true ]] || echo "$gpu_reason")")" "$cuda_backend"
  printf ' "summary": {"pass": %d, "fail": %d, "skip": %d},\n "steps": [\n' "$n_pass" "$n_fail" "$n_skip"
  sed '$!s/$/,/' "$STEPS"
  printf ']}\n'
} >"$RESULTS/results.json"
tar -czf "$RESULTS/logs.tar.gz" -C "$WORK" logs 2>/dev/null
log "results: $RESULTS/results.json (pass $n_pass, fail $n_fail, skip $n_skip)"
[[ $n_fail == 0 ]]
