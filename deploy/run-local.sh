#!/usr/bin/env bash
# `make run`: a name server, a SYNC_MASTER and its SLAVE in the foreground until Ctrl-C, which
# stops them all (slave first, then master, then name server).
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
  for ((i=${#pids[@]}-1; i>=0; i--)); do
    kill -TERM "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
  echo "stopped; stores kept in $data"
}
trap stop_all INT TERM

wait_port() {  # port pid log
  for _ in $(seq 1 150); do
    (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "failed to start:"; tail -5 "$3"; stop_all; exit 1; }
    sleep 0.1
  done
  echo "port $1 did not open"; stop_all; exit 1
}

"$bin/namesrvd" -c "$here/local/namesrv.properties" 2> "$data/namesrvd.log" &
pids+=($!); wait_port 9876 "${pids[-1]}" "$data/namesrvd.log"
"$bin/brokerd" -c "$here/local/broker-a.properties" "storePathRootDir=$data/broker-a" \
  2> "$data/broker-a.log" &
pids+=($!); wait_port 10911 "${pids[-1]}" "$data/broker-a.log"
"$bin/brokerd" -c "$here/local/broker-a-s.properties" "storePathRootDir=$data/broker-a-s" \
  2> "$data/broker-a-s.log" &
pids+=($!); wait_port 11011 "${pids[-1]}" "$data/broker-a-s.log"
echo "logs in $data (namesrvd.log, broker-a.log, broker-a-s.log); Ctrl-C stops everything"
wait -n "${pids[@]}" || true
stop_all
