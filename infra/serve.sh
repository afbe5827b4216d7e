#!/usr/bin/env bash
# `make serve`: a local Prefect server (SQLite) + the project's deployments + a process worker,
# all in the foreground. Ctrl-C stops the worker and the server together.
set -euo pipefail
# Job control: the server and the worker run in their own process groups with the default Ctrl-C
# handling (without it bash starts background jobs ignoring SIGINT, and the worker takes its time
# over SIGTERM); Ctrl-C reaches this script, whose cleanup interrupts them.
set -m
cd "$(dirname "$0")/.."
export ELECTRA_REPO="$PWD"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export ELECTRA_WORK_POOL="${ELECTRA_WORK_POOL:-electra-local}"
PORT="${PREFECT_PORT:-4200}"
export PREFECT_API_URL="http://127.0.0.1:${PORT}/api"
PREFECT=.venv/bin/prefect

# The evaluate deployments read their data from here (evaluation/evaluation_job.py): fail
# now, naming the variable, rather than at the first committed checkpoint.
if [ -z "${ELECTRA_GLUE_DIR:-}" ] || [ ! -d "${ELECTRA_GLUE_DIR}" ]; then
    echo "make serve: ELECTRA_GLUE_DIR='${ELECTRA_GLUE_DIR:-}' is not a folder; set it to the official GLUE download (CoLA/, MRPC/, STS-B/, RTE/, ...), e.g. ELECTRA_GLUE_DIR=\$HOME/glue_data make serve" >&2
    exit 2
fi
if [ -n "${ELECTRA_SQUAD_DIR:-}" ] && [ ! -d "${ELECTRA_SQUAD_DIR}" ]; then
    echo "make serve: ELECTRA_SQUAD_DIR='${ELECTRA_SQUAD_DIR}' is not a folder (unset it to evaluate GLUE only)" >&2
    exit 2
fi
export ELECTRA_GLUE_DIR="$(cd "$ELECTRA_GLUE_DIR" && pwd)"
# The hourly scan's runs folder (prefect.yaml: evaluate-new-checkpoints' `runs`), absolute and
# present, so the deployment runs as shipped: an empty folder is a scan with nothing to do.
export ELECTRA_RUNS_DIR="${ELECTRA_RUNS_DIR:-$ELECTRA_REPO/runs}"
mkdir -p "$ELECTRA_RUNS_DIR"
export ELECTRA_RUNS_DIR="$(cd "$ELECTRA_RUNS_DIR" && pwd)"
echo "make serve: the hourly scan evaluates the runs under ELECTRA_RUNS_DIR=$ELECTRA_RUNS_DIR"
[ -n "${ELECTRA_SQUAD_DIR:-}" ] && export ELECTRA_SQUAD_DIR="$(cd "$ELECTRA_SQUAD_DIR" && pwd)"

"$PREFECT" server start --host 127.0.0.1 --port "$PORT" &
SERVER=$!
WORKER=""
stop() {  # SIGINT, then SIGKILL after 10 s of graceful shutdown; `wait` reaps them as they exit
    local pids="$*"
    [ -n "${pids// /}" ] || return 0
    kill -INT $pids 2>/dev/null || true
    ( sleep 10; kill -9 $pids 2>/dev/null ) &
    local killer=$!
    wait $pids 2>/dev/null || true
    kill "$killer" 2>/dev/null || true
}
cleanup() {  # the worker first, while the server still answers it (stopped together, the worker
    # met a closed port and printed a ConnectionRefusedError traceback), then the server
    trap - EXIT INT TERM
    stop ${WORKER}
    stop "$SERVER"
    wait 2>/dev/null || true
}
# Ctrl-C or SIGTERM (`docker stop`, systemd, `kill`) is how this server is meant to end: a clean
# stop exits 0, not 130/143 (make printed "Error 143" for a requested stop).
trap 'cleanup; exit 0' INT TERM
trap cleanup EXIT

for _ in $(seq 1 120); do
    if .venv/bin/python -c "import urllib.request,sys; urllib.request.urlopen('${PREFECT_API_URL}/health', timeout=2)" 2>/dev/null; then
        break
    fi
    kill -0 "$SERVER" 2>/dev/null || { echo "prefect server exited" >&2; exit 1; }
    sleep 1
done
"$PREFECT" work-pool create "$ELECTRA_WORK_POOL" --type process --overwrite >/dev/null
# One `prefect deploy -n` per deployment: prefect 3.8.8's CLI registers the deployment, then
# fails on its own "is a worker online?" hint (the server rejects the request's null limit with
# 422), which would abort `deploy --all` after the first. So deploy each, then verify each exists.
# Each line: "<flow name> <deployment name>" (the flow name is the entrypoint's function, dashed).
DEPLOYMENTS=$(.venv/bin/python -c "import yaml
for d in yaml.safe_load(open('prefect.yaml'))['deployments']:
    print(d['entrypoint'].split(':')[1].replace('_', '-'), d['name'])")
while read -r flow_name name; do
    "$PREFECT" --no-prompt deploy -n "$name" </dev/null >/dev/null 2>&1 || true
    "$PREFECT" deployment inspect "$flow_name/$name" </dev/null >/dev/null || { echo "deployment $flow_name/$name was not registered" >&2; exit 1; }
    echo "deployed $flow_name/$name"
done <<< "$DEPLOYMENTS"
echo "serving deployments on ${PREFECT_API_URL} (UI: http://127.0.0.1:${PORT}); Ctrl-C stops"
"$PREFECT" worker start --pool "$ELECTRA_WORK_POOL" &
WORKER=$!
wait "$WORKER"
