#!/usr/bin/env bash
# `make run`: a name server and a broker in the foreground until Ctrl-C, which stops both.
# Usage: deploy/run-local.sh [DATA_DIR]   (default: ./data)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${TIDEMQ_BIN:-$here/../.venv/bin}"
data="$(mkdir -p "${1:-data}" && cd "${1:-data}" && pwd)"
pids=()

stopped=0
stop_all() {
  trap - INT TERM
  [ "$stopped" = 1 ] && return
  stopped=1
  echo "stopping..."
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  echo "stopped; store kept in $data"
}
trap stop_all INT TERM

"$bin/namesrvd" -c "$here/single/namesrv.properties" 2> "$data/namesrvd.log" &
pids+=($!)
for _ in $(seq 1 100); do
  (echo > /dev/tcp/127.0.0.1/9876) 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "namesrvd failed:"; tail -5 "$data/namesrvd.log"; exit 1; }
  sleep 0.1
done
"$bin/brokerd" -c "$here/single/broker-a.properties" "storePathRootDir=$data/broker-a" 2> "$data/broker-a.log" &
pids+=($!)
echo "logs: $data/namesrvd.log $data/broker-a.log  (Ctrl-C stops everything)"
wait -n "${pids[@]}" || true
stop_all
