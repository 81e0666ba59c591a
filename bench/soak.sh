#!/usr/bin/env bash
# Soak: mixed load against attnscope-server for a long run, sampling the server's resident memory,
# threads and open files as it goes, so that a leak shows as a rising column after warm-up.
#
# Usage: bench/soak.sh [--model DIR] [--clients 16] [--duration 600] [--every 30]
#   --model DIR: a checkpoint folder; default: the built-in checkpoints/default.
# Prints one line per sample (seconds, VmRSS in MB, threads, open files), then the load's report.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
server="$root/build/server/attnscope-server"
cli="$root/build/client/attnscope"
model=""
clients=16
duration=600
every=30
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --every) every="$2"; shift 2 ;;
    *) echo "soak: unknown flag $1 (--model, --clients, --duration, --every)" >&2; exit 2 ;;
  esac
done
for flag in clients duration every; do
  value=${!flag}
  [[ "$value" =~ ^[1-9][0-9]*$ ]] || {
    echo "soak: --$flag '$value': expected a whole number of at least 1" >&2
    exit 2
  }
done
[ -z "$model" ] || [ -f "$model/config.json" ] || {
  echo "soak: --model '$model': expected a checkpoint folder with config.json" >&2
  exit 2
}
model_flags=()
[ -n "$model" ] && model_flags=(--model "soak=$model")
for binary in "$server" "$cli"; do
  [ -x "$binary" ] || { echo "soak: $binary is missing; run scripts/build.sh" >&2; exit 2; }
done

log=$(mktemp)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -f "$log" "$log.bench"; }
trap cleanup EXIT
source "$root/bench/server_util.sh"
start_server "${model_flags[@]}"

echo "$(cpu_line); $clients clients for $duration s"
"$cli" bench --server "$address" --clients "$clients" --duration "${duration}s" >"$log.bench" &
bench=$!
printf '%8s %10s %8s %8s\n' seconds rss_mb threads fds
start=$(date +%s)
while kill -0 "$bench" 2>/dev/null; do
  rss_kb=$(sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$pid/status")
  threads=$(sed -n 's/^Threads:[[:space:]]*//p' "/proc/$pid/status")
  fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
  printf '%8d %10.1f %8d %8d\n' $(($(date +%s) - start)) "$(echo "$rss_kb / 1024" | bc -l)" \
    "$threads" "$fds"
  sleep "$every"
done
status=0
wait "$bench" || status=$?
cat "$log.bench"
exit "$status"
