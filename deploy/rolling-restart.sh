#!/usr/bin/env bash
# Restarts the replicas of deploy/docker-compose.yml's `balanced` profile one at a time with
# `docker restart` (SIGTERM: each drains its calls and exits), and waits after each until HAProxy
# has every replica it had before back in its rotation, each UP with its last health check passed
# (SERVING), before the next one goes. A replica that HAProxy finds again through Docker's DNS
# counts as UP before its first check has run, so UP alone is not enough.
#
#   deploy/rolling-restart.sh [docker-compose options: -p PROJECT, -f FILE ...]
#   deploy/rolling-restart.sh --serving   # prints how many replicas serve behind HAProxy now
#
# ATTNSCOPE_BALANCER_STATS: HAProxy's stats page (default http://127.0.0.1:8404/stats, where the
# profile publishes it). ATTNSCOPE_RESTART_TIMEOUT: seconds a replica may take to serve again
# (default 180). Exits non-zero, naming the replica, when one does not come back in time.
set -euo pipefail
deploy=$(dirname "$0")
stats=${ATTNSCOPE_BALANCER_STATS:-http://127.0.0.1:8404/stats}
timeout=${ATTNSCOPE_RESTART_TIMEOUT:-180}
compose=(docker-compose -f "$deploy/docker-compose.yml" "$@" --profile balanced)

# How many servers of HAProxy's backend "replicas" are UP with a passed last check.
serving() {
  curl -sSf "$stats;csv" | awk -F, '
    NR == 1 { for (i = 1; i <= NF; ++i) column[$i] = i; next }
    $1 == "replicas" && $2 != "BACKEND" && $column["status"] == "UP" &&
      $column["check_status"] ~ /OK/ { ++n }
    END { print n + 0 }'
}

if [ "${1:-}" = --serving ]; then
  serving
  exit
fi

replicas=$("${compose[@]}" ps -q replicas)
[ -n "$replicas" ] || {
  echo "rolling-restart: no running container of the service 'replicas'" >&2
  exit 1
}
expected=$(serving)
echo "rolling-restart: $expected replicas serving behind HAProxy"
for replica in $replicas; do
  name=$(docker inspect -f '{{.Name}}' "$replica")
  name=${name#/}
  start=$SECONDS
  docker restart -t 30 "$replica" >/dev/null
  until [ "$(serving)" -ge "$expected" ]; do
    if ((SECONDS - start > timeout)); then
      echo "rolling-restart: replica $name not back in HAProxy's rotation within" \
        "${timeout} s (its log: docker logs $name)" >&2
      exit 1
    fi
    sleep 0.5
  done
  echo "rolling-restart: replica $name serving again after $((SECONDS - start)) s"
done
