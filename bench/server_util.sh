# Sourced by the load scripts of bench/: starts and stops attnscope-server on loopback.
# Needs `server` (the binary) and `log` (a file for its output) set by the caller.

# Starts the server with the given flags (gRPC on a free port, no metrics, no HTTP); sets `pid` and
# `address` (HOST:PORT) once it listens, or exits.
start_server() {
  "$server" --listen 127.0.0.1:0 --metrics_port 0 --http_listen "" "$@" >"$log" 2>&1 &
  pid=$!
  address=""
  for _ in $(seq 600); do
    address=$(sed -n 's/^attnscope-server listening on \([^ ]*\).*/\1/p' "$log")
    [ -n "$address" ] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.2
  done
  echo "$(basename "$0"): the server did not start in 120 s" >&2
  exit 1
}

stop_server() {
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
}

cpu_line() {
  echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores"
}
