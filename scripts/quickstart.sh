#!/usr/bin/env bash
# The README's first command: installs what it needs (the Debian packages;
# not the tests' Python tools), builds, fetches the models and runs the main
# job on the default one: a cluster on this machine — two
# strata-worker processes and a strata-coordinator on loopback, from the
# config files in deploy/examples/ — then a client generating from the
# default model through the coordinator (docs/cluster.md does the same by
# hand). The processes are stopped when it ends.
#   STRATA_PROMPT / STRATA_N: the prompt and the number of tokens.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
"$STRATA_ROOT/scripts/install-deps.sh"
"$STRATA_ROOT/scripts/fetch-models.sh"
# Only the programs it runs (scripts/test.sh builds the tests).
STRATA_TARGETS="strata strata_worker_main strata-coordinator" \
  "$STRATA_ROOT/scripts/build.sh" "$STRATA_ROOT/build"

build="$STRATA_ROOT/build"
examples="$STRATA_ROOT/deploy/examples"
logs="$(mktemp -d)"
pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_all EXIT

# Starts a process in the background and waits for its "listening on" line.
start() {
  local name="$1"; shift
  "$@" >"$logs/$name.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 600); do
    grep -q "listening on" "$logs/$name.log" && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "quickstart: $name did not start; its log ($logs/$name.log):" >&2
  cat "$logs/$name.log" >&2
  exit 1
}

# The cluster's links are mutual TLS (docs/security.md): the example configs
# read their certificates from ~/.cache/strata/certs, made here once by
# `strata certs` (a CA and one certificate per process).
certs="$HOME/.cache/strata/certs"  # where deploy/examples/*.yaml look
if [ ! -e "$certs/ca.pem" ]; then
  "$build/client/cli/strata" certs "$certs" --names coordinator,w0,w1 >/dev/null
fi
# --model-dir: the configs' model_dirs is ~/.cache/strata/models, the
# models' place unless STRATA_CACHE moves them.
start worker-0 "$build/worker/strata-worker" --config "$examples/worker-0.yaml" \
  --model-dir "$STRATA_MODELS"
start worker-1 "$build/worker/strata-worker" --config "$examples/worker-1.yaml" \
  --model-dir "$STRATA_MODELS"
start coordinator "$build/coordinator/strata-coordinator" \
  --config "$examples/cluster.yaml" --model "$STRATA_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"

server=127.0.0.1:50051
# The coordinator loads the workers' shards after it starts listening; it
# serves once every shard has loaded. The cluster's own state is the
# top-level "state" of `strata status --json` (each worker has one too, and
# one worker may be serving while the other still loads).
cluster_serving() {
  "$build/client/cli/strata" status --server "$server" --json 2>/dev/null |
    python3 -c 'import json, sys; sys.exit(json.load(sys.stdin).get("state") != "serving")' \
    2>/dev/null
}
serving=0
for _ in $(seq 1 600); do
  if cluster_serving; then serving=1; break; fi
  sleep 0.2
done
"$build/client/cli/strata" status --server "$server"
if [ "$serving" != 1 ]; then
  echo "quickstart: the cluster did not reach the serving state in 120 s; logs in $logs" >&2
  exit 1
fi
"$build/client/cli/strata" generate --server "$server" \
  -p "${STRATA_PROMPT:-The three primary colors are}" -n "${STRATA_N:-64}"
# The same cluster through its OpenAI-compatible HTTP API (docs/http.md):
# the address the coordinator printed, a chat completion in the shape any
# OpenAI SDK sends (Python's standard library here, so no curl is needed).
http="$(grep -m1 -o 'http listening on [0-9.:]*' "$logs/coordinator.log" | awk '{print $4}')"
if [ -n "$http" ]; then
  echo "quickstart: POST http://$http/v1/chat/completions"
  python3 - "$http" <<'PY'
import json, sys, urllib.request
body = {"messages": [{"role": "user", "content": "Name the three primary colors."}], "max_tokens": 48}
req = urllib.request.Request(f"http://{sys.argv[1]}/v1/chat/completions", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=300) as r:
    reply = json.load(r)
print(reply["choices"][0]["message"]["content"])
print(json.dumps(reply["usage"]))
PY
fi
