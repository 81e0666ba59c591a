#!/usr/bin/env bash
# Installs every build and test dependency of attnscope from Debian 12 packages (Node.js and npm
# for the dashboard, Chromium for its browser test, clang and libFuzzer for fuzz/), plus any
# package names given as arguments (recipes that need more, e.g. scripts/make_default_model.sh).
# Usage: scripts/install-deps.sh [--build-only | --docker-check] [PACKAGE...]
# --build-only installs only what building the shipped programs needs (scripts/build.sh
# --shipped; the Dockerfile's build stage), none of the tests' tools; --docker-check only what
# scripts/docker-check.sh runs on the host, which builds everything else inside the image.
# Idempotent: apt runs only when something is missing.
set -euo pipefail

mode=all
case "${1:-}" in
  --build-only) mode=build; shift ;;
  --docker-check) mode=docker-check; shift ;;
esac

# The compiler, the build tools and every library CMake's configure step looks for: one configure
# defines every target, so the tests' libraries (GoogleTest, yaml-cpp, cpp-httplib) are among them
# although only the tests link them.
build_packages=(
  build-essential cmake pkg-config ninja-build ccache
  libtorch-dev libopenblas0-pthread libopenblas-dev libdnnl-dev ocl-icd-opencl-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libcurl4-openssl-dev libssl-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libboost1.81-dev libcpp-httplib-dev libutf8proc-dev libsentencepiece-dev
  libpcre2-dev libzip-dev
  libcli11-dev
  libcairo2-dev libpango1.0-dev
  libyaml-cpp-dev
)
# What the tests run besides the programs: the CLI's CJK glyphs, the Python references and client,
# Prometheus, docker-compose, HAProxy, the dashboard's browser, clang for the fuzz targets.
test_packages=(
  fonts-noto-cjk
  python3-torch python3-numpy python3-grpcio python3-protobuf openssl
  # pip, a venv and setuptools: the Python client (client/python) installed as its test does it
  python3-pip python3-setuptools python3-wheel python3-venv
  prometheus docker-compose
  # the L7 gRPC balancer in front of replicas (deploy/haproxy; tests/integration/balancer_test)
  haproxy
  chromium
  clang-14 libclang-rt-14-dev
)
# scripts/docker-check.sh: the Docker engine and client, the maker of the base image where no
# registry is reachable, docker-compose (v1), and the tools of its checks.
docker_check_packages=(docker.io mmdebstrap docker-compose curl jq iproute2)

case $mode in
  all) packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  build) packages=("${build_packages[@]}") ;;
  docker-check) packages=("${docker_check_packages[@]}") ;;
esac
packages+=("$@")
# The dashboard (client/dashboard) is built with Node.js and npm: Debian's, unless a Node.js that
# carries its own npm is installed already (NodeSource's nodejs package conflicts with Debian's
# npm, so apt would remove it to install that).
if [ "$mode" != docker-check ] && ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  # Packages such as prometheus start their daemon from postinst (invoke-rc.d). The tests run
  # /usr/bin/prometheus themselves, and in a chroot without systemd (CI's pristine root) the init
  # script would start a server that outlives the install. A policy-rc.d that denies every start,
  # Debian's mechanism for chroots and images, is in place for this install only, unless the
  # system already has one of its own.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    "${sudo_cmd[@]}" sh -c "printf '#!/bin/sh\\nexit 101\\n' > $policy && chmod 755 $policy"
    trap '"${sudo_cmd[@]}" rm -f "$policy"' EXIT
  fi
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
