#!/usr/bin/env bash
# Builds attnscope's Docker image on a real engine, runs it and checks it from outside, then brings
# up the docker-compose stack (attnscope and Prometheus) and checks that too. Not part of
# scripts/test.sh: a cold image build alone takes longer than CI's budget.
#
#   1. Tools: Debian's docker.io, mmdebstrap, docker-compose, curl and jq
#      (scripts/install-deps.sh --docker-check). When no engine answers, dockerd is started here
#      and stopped at the end.
#   2. The base image: the Dockerfile's FROM (debian:12.11-slim) as the engine has it (pulled from a
#      registry beforehand); when it has none, a Debian 12 root made by mmdebstrap from this
#      machine's Debian mirrors, imported under that name.
#   3. The image, built with BuildKit (its compile cache is a cache mount, so a rebuild after a
#      change is fast): build time and size.
#   4. A container, its ports published on loopback only: seconds from start to SERVING, the CLI
#      over gRPC from a second container, HTTP/JSON and the dashboard with curl, /metrics, the
#      HEALTHCHECK's verdict, the user, and SIGTERM: exit 0 and how long it took; then SIGTERM
#      during start-up, which must stop the container at once.
#   5. docker-compose: attnscope and Prometheus (Prometheus and HAProxy built from Debian's
#      packages through deploy/docker-compose.debian-images.yml when the pinned images cannot be
#      pulled), a request through the published port, then Prometheus' HTTP API: the attnscope
#      target up and every alert rule of deploy/prometheus/alerts.yml loaded and evaluated.
#   6. The compose file's `balanced` profile: three replicas behind HAProxy, calls reaching each,
#      then a rolling restart (deploy/rolling-restart.sh: `docker restart` of one replica at a
#      time, each back in the rotation before the next) under a client calling without pause: no
#      call may fail.
#
# Prints "docker-check FIGURE VALUE" lines (image_bytes, build_seconds, serving_seconds,
# sigterm_seconds, startup_sigterm_seconds, rolling_restart_calls, rolling_restart_failed_calls), exits non-zero with the reason on the first failure, and removes its
# containers and the compose stack whatever happens. Builds run with --network host, so that apt
# and npm inside reach what this machine reaches. Runs as root (through sudo when started by
# another user): the engine, its socket and mmdebstrap need it.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || exec sudo "$0" "$@"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

base_image=$(sed -n 's/^FROM \([^ ]*\) AS build$/\1/p' Dockerfile)
image=attnscope:latest
container=attnscope-docker-check
poller=attnscope-docker-check-poll
caller=attnscope-docker-check-caller
project=attnscope-docker-check
compose_files=(-f deploy/docker-compose.yml)
# Every service, the balanced profile's included.
compose() { docker-compose -p "$project" "${compose_files[@]}" --profile balanced "$@"; }
work=$(mktemp -d)
dockerd_pid=

fail() {
  echo "docker-check: FAILED: $*" >&2
  exit 1
}
figure() {
  echo "docker-check $1 $2"
}

cleanup() {
  local status=$?
  set +e
  if [ $status -ne 0 ] && docker inspect "$container" >/dev/null 2>&1; then
    echo "docker-check: the container's last log lines:" >&2
    docker logs --tail 20 "$container" >&2
  fi
  docker rm -f "$container" "$poller" "$caller" >/dev/null 2>&1
  if [ -f "$work/compose-up" ]; then
    if [ $status -ne 0 ]; then
      compose logs --tail 20 >&2
    fi
    compose down -v --remove-orphans >/dev/null 2>&1
  fi
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid"
    wait "$dockerd_pid"
  fi
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

# A port nothing on this machine listens on, for the container's published ports.
free_port() {
  local port
  for port in $(shuf -i 20000-60000 -n 100); do
    if ! ss -Htln "sport = :$port" | grep -q .; then
      echo "$port"
      return
    fi
  done
  fail "no free TCP port found"
}

# Runs a command every half second until it succeeds; fails with `what` after `seconds`.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what: not within ${seconds} s"
    sleep 0.5
  done
}

# Seconds, with decimals, from $1 to $2 (both `date +%s.%N` or anything `date -d` reads).
seconds_between() {
  awk -v from="$(date -d "$1" +%s.%N)" -v to="$(date -d "$2" +%s.%N)" \
    'BEGIN { printf "%.1f\n", to - from }'
}

# --- 1. Tools and the engine ---------------------------------------------------------------------
bash scripts/install-deps.sh --docker-check
# BuildKit through the client: Debian's docker.io client (20.10) drives the engine's BuildKit
# itself; a client of Docker 23 or later needs its buildx plugin, which Debian 12 does not package.
docker_build=(docker build)
if ! docker buildx version >/dev/null 2>&1; then docker_build=(/usr/bin/docker build); fi
if ! docker info >/dev/null 2>&1; then
  # No engine answers (a machine without systemd, e.g. a container or a chroot): start one.
  dockerd >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  wait_for 60 "dockerd answering (its log: $work/dockerd.log)" docker info
fi

# --- 2. The base image ---------------------------------------------------------------------------
[ -n "$base_image" ] || fail "no 'FROM ... AS build' line in the Dockerfile"
if ! docker image inspect "$base_image" >/dev/null 2>&1; then
  echo "docker-check: making $base_image with mmdebstrap from this machine's Debian mirrors"
  # Like Debian's own slim images: no manual pages, documentation or translations, and apt keeps
  # neither its downloaded packages nor its binary caches in the layers built on it.
  cat >"$work/apt-clean.conf" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  mmdebstrap --variant=apt --quiet \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --aptopt="$work/apt-clean.conf" \
    bookworm "$work/base.tar"
  docker import "$work/base.tar" "$base_image" >/dev/null
  rm -f "$work/base.tar"
fi

# --- 3. The image --------------------------------------------------------------------------------
# npm inside trusts what this machine trusts (a proxy that inspects TLS has its own authority).
secrets=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  secrets=(--secret id=ca-certificates,src=/etc/ssl/certs/ca-certificates.crt)
fi
start=$(date +%s.%N)
DOCKER_BUILDKIT=1 "${docker_build[@]}" --network host --progress plain "${secrets[@]}" \
  -t "$image" . \
  >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  fail "docker build (the last lines of its output are above)"
}
figure build_seconds "$(seconds_between "@$start" "@$(date +%s.%N)")"
figure image_bytes "$(docker image inspect -f '{{.Size}}' "$image")"

# --- 4. One container ----------------------------------------------------------------------------
grpc_port=$(free_port)
http_port=$(free_port)
metrics_port=$(free_port)
# The CLI of the image, in a container of its own on the host's network: a client from outside.
cli() {
  docker run --rm --network host --entrypoint attnscope "$image" "$@" \
    --server "127.0.0.1:$grpc_port"
}
# The poller runs before the server starts, so that its first SERVING marks the server's readiness
# and not the time a client container takes to start.
docker run -d --name "$poller" --network host --entrypoint bash "$image" -c \
  "until attnscope health --server 127.0.0.1:$grpc_port --timeout=1s >/dev/null 2>&1; do
     sleep 0.05
   done
   date +%s.%N" >/dev/null
docker run -d --name "$container" -p "127.0.0.1:$grpc_port:50051" \
  -p "127.0.0.1:$http_port:8080" -p "127.0.0.1:$metrics_port:9464" "$image" >/dev/null
poller_done() { [ "$(docker inspect -f '{{.State.Running}}' "$poller")" = false ]; }
wait_for 120 "the poller seeing SERVING" poller_done
[ "$(docker wait "$poller")" = 0 ] ||
  fail "the SERVING poller failed: $(docker logs "$poller" 2>&1)"
started=$(docker inspect -f '{{.State.StartedAt}}' "$container")
figure serving_seconds "$(seconds_between "$started" "@$(docker logs "$poller")")"

[ "$(docker exec "$container" id -u)" = 10001 ] || fail "the server does not run as uid 10001"
models=$(cli models) || fail "attnscope models over gRPC"
jq -e 'any(.models[]; .name == "default")' <<<"$models" >/dev/null ||
  fail "ListModels has no model 'default': $models"
cli attention --model default --text "Tôi yêu Việt Nam quá" --layers=-1 --aggregate mean \
  --format text >"$work/attention.txt" || fail "attnscope attention over gRPC"
grep -q "Việt" "$work/attention.txt" || fail "GetAttention's text answer lacks the input's tokens"
http=127.0.0.1:$http_port
curl -sSf "$http/attnscope.v1.AttentionService/GetAttention" -H 'Content-Type: application/json' \
  -d '{"text": "나는 오늘 랭체인을 공부한다", "layers": [-1]}' >"$work/attention.json" ||
  fail "GetAttention over HTTP/JSON"
jq -e '.attentions.shape | length == 4' "$work/attention.json" >/dev/null ||
  fail "the HTTP/JSON answer has no 4-dimensional attentions: $(head -c 300 "$work/attention.json")"
curl -sSf "$http/" | grep -q 'app.js' || fail "the dashboard's page at / does not load app.js"
curl -sSf -o /dev/null "$http/app.js" || fail "the dashboard's app.js"
curl -sSf "127.0.0.1:$metrics_port/metrics" >"$work/metrics.txt" || fail "/metrics"
grep -q '^attnscope_requests_total{.*rpc="GetAttention"' "$work/metrics.txt" ||
  fail "/metrics counts no GetAttention call"
healthy() { [ "$(docker inspect -f '{{.State.Health.Status}}' "$container")" = healthy ]; }
wait_for 60 "the HEALTHCHECK reporting healthy" healthy

start=$(date +%s.%N)
docker kill --signal TERM "$container" >/dev/null
exit_code=$(docker wait "$container")
figure sigterm_seconds "$(seconds_between "@$start" "@$(date +%s.%N)")"
[ "$exit_code" = 0 ] || fail "the server exited with $exit_code after SIGTERM"
docker rm "$container" >/dev/null
# SIGTERM while the server starts, before its main() blocks the signal: tini, the image's PID 1,
# passes it on, and the server dies of it (143) instead of running on until `docker stop` kills it.
docker run -d --name "$container" "$image" >/dev/null
sleep 0.3
start=$(date +%s.%N)
docker stop -t 30 "$container" >/dev/null
stop_seconds=$(seconds_between "@$start" "@$(date +%s.%N)")
figure startup_sigterm_seconds "$stop_seconds"
exit_code=$(docker inspect -f '{{.State.ExitCode}}' "$container")
[[ "$exit_code" == 0 || "$exit_code" == 143 ]] ||
  fail "a SIGTERM during start-up ended the container with $exit_code, not 143 (or 0)"
awk -v s="$stop_seconds" 'BEGIN { exit !(s < 10) }' ||
  fail "a SIGTERM during start-up took $stop_seconds s to stop the container"
docker rm "$container" >/dev/null

# --- 5. docker-compose ---------------------------------------------------------------------------
for port in 50051 8080 9464 9090 50052 8404; do
  ! ss -Htln "sport = :$port" | grep -q . ||
    fail "port $port is taken on this machine; the compose stack publishes it"
done
# The pinned images of Prometheus and HAProxy, or both from Debian's packages.
pinned_image() {
  compose config | sed -n "/^  $1:/,/^  [a-z]/s/^    image: //p"
}
for service in prometheus balancer; do
  pinned=$(pinned_image "$service")
  if ! docker image inspect "$pinned" >/dev/null 2>&1 && ! docker pull "$pinned" >/dev/null 2>&1
  then
    echo "docker-check: $pinned cannot be pulled; Prometheus and HAProxy from Debian's packages"
    compose_files+=(-f deploy/docker-compose.debian-images.yml)
    compose build prometheus balancer >"$work/debian-images-build.log" 2>&1 || {
      tail -20 "$work/debian-images-build.log" >&2
      fail "building the Prometheus and HAProxy images"
    }
    break
  fi
done
touch "$work/compose-up"
# The image built above is the compose file's attnscope:latest; Grafana is checked statically.
compose up -d --no-build attnscope prometheus \
  >"$work/compose-up.log" 2>&1 || {
  cat "$work/compose-up.log" >&2
  fail "docker-compose up"
}
wait_for 120 "attnscope answering through the compose stack's port" \
  curl -sSf 127.0.0.1:8080/attnscope.v1.AttentionService/ListModels \
  -H 'Content-Type: application/json' -d '{}'
curl -sSf 127.0.0.1:8080/attnscope.v1.AttentionService/GetAttention \
  -H 'Content-Type: application/json' -d '{"text": "hello world"}' | jq -e .attentions >/dev/null ||
  fail "GetAttention through the compose stack"
target_up() {
  curl -sSf 127.0.0.1:9090/api/v1/targets | jq -e '.data.activeTargets |
    any(.labels.job == "attnscope" and .scrapeUrl == "http://attnscope:9464/metrics"
        and .health == "up")'
}
wait_for 90 "Prometheus reporting the attnscope target up (/api/v1/targets)" target_up
alerts=$(grep -c '^ *- alert:' deploy/prometheus/alerts.yml)
rules_evaluated() {
  curl -sSf 127.0.0.1:9090/api/v1/rules | jq -e --argjson n "$alerts" '[.data.groups[].rules[] |
    select(.type == "alerting" and .health == "ok" and .lastEvaluation != "0001-01-01T00:00:00Z")]
    | length == $n'
}
wait_for 90 "Prometheus evaluating all $alerts alert rules (/api/v1/rules)" rules_evaluated
curl -sSf '127.0.0.1:9090/api/v1/query?query=attnscope_requests_total' |
  jq -e '.data.result | length > 0' >/dev/null || fail "Prometheus has no attnscope_requests_total"

# --- 6. The balanced profile: three replicas behind HAProxy --------------------------------------
compose up -d --no-build replicas balancer >"$work/balanced-up.log" 2>&1 || {
  cat "$work/balanced-up.log" >&2
  fail "docker-compose --profile balanced up"
}
# HAProxy's replicas UP with their last health check passed (a replica found again through
# Docker's DNS is UP before its first check).
replicas_serving() { bash deploy/rolling-restart.sh --serving; }
three_serving() { [ "$(replicas_serving)" = 3 ]; }
wait_for 180 "HAProxy reporting 3 replicas serving (127.0.0.1:8404/stats)" three_serving
balanced() {
  docker run --rm --network host --entrypoint attnscope "$image" "$@" --server 127.0.0.1:50052
}
for _ in $(seq 12); do
  balanced tokenize --model default --text "xin chào" >/dev/null || fail "a call through HAProxy"
done
served=$(curl -sSf 127.0.0.1:8404/metrics |
  grep -c '^haproxy_server_sessions_total{proxy="replicas",server="[^"]*"} [1-9]')
[ "$served" = 3 ] || fail "12 calls through HAProxy reached $served replicas, not 3"

# One client calling without pause (GetAttention, then StreamAttention), each call a new process of
# the CLI, whose retries of UNAVAILABLE are on by default; it stops when /tmp/stop appears.
docker run -d --name "$caller" --network host --entrypoint bash "$image" -c '
  calls=0 failed=0
  while [ ! -e /tmp/stop ]; do
    for command in attention stream; do
      calls=$((calls + 1))
      attnscope "$command" --model default --text "Tôi yêu Việt Nam" --layers=-1 \
          --aggregate mean --server 127.0.0.1:50052 >/dev/null 2>>/tmp/errors ||
        failed=$((failed + 1))
    done
  done
  echo "$calls $failed"
  cat /tmp/errors >&2' >/dev/null
sleep 2
ATTNSCOPE_RESTART_TIMEOUT=180 bash deploy/rolling-restart.sh -p "$project" "${compose_files[@]:2}" ||
  fail "deploy/rolling-restart.sh"
sleep 2
docker exec "$caller" touch /tmp/stop
[ "$(docker wait "$caller")" = 0 ] || fail "the calling client: $(docker logs "$caller" 2>&1)"
read -r calls failed < <(docker logs "$caller" 2>/dev/null)
figure rolling_restart_calls "$calls"
figure rolling_restart_failed_calls "$failed"
[ "$failed" = 0 ] || fail "$failed of $calls calls failed during the rolling restart:
$(docker logs "$caller" 2>&1 >/dev/null | tail -5)"
echo "docker-check: passed"
