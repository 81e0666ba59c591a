#!/usr/bin/env bash
# Load with and without dynamic batching: starts attnscope-server on a model with its default flags,
# runs `attnscope bench` against it, then does the same with --max_batch_size 1 (batching off), and
# prints both reports and the throughput ratio. The server's other flags stay at their defaults
# (--max_concurrent_requests 64 included), so errors in the reports are what a default deployment
# would answer.
#
# Usage: bench/load_bench.sh [--model DIR] [--clients 32] [--duration 30s] [--rpc mixed]
#   --model DIR: a checkpoint folder; default: the built-in checkpoints/default.
#   The other flags go to `attnscope bench` as they are.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
server="$root/build/server/attnscope-server"
cli="$root/build/client/attnscope"
model=""
bench_flags=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --model=*) model="${1#--model=}"; shift ;;
    *) bench_flags+=("$1"); shift ;;
  esac
done
model_flags=()
[ -n "$model" ] && model_flags=(--model "bench=$model")
for binary in "$server" "$cli"; do
  [ -x "$binary" ] || { echo "load_bench: $binary is missing; run scripts/build.sh" >&2; exit 2; }
done

log=$(mktemp)
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -f "$log"; }
trap cleanup EXIT
source "$root/bench/server_util.sh"

run() {  # name, server flags...
  local name=$1
  shift
  start_server "${model_flags[@]}" "$@"
  echo "== $name: attnscope-server ${model_flags[*]} $*"
  "$cli" bench --server "$address" "${bench_flags[@]}" | tee "$log.$name"
  stop_server
}

cpu_line
run batching
run no-batching --max_batch_size 1
rate() { sed -n 's/.*"calls_per_second": *\([0-9.e+-]*\).*/\1/p' "$1"; }
on=$(rate "$log.batching")
off=$(rate "$log.no-batching")
rm -f "$log.batching" "$log.no-batching"
if [ -n "$on" ] && [ -n "$off" ]; then
  echo "throughput with batching / without: $(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.2f", a / b }')"
fi
