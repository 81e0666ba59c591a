# attnscope image: attnscope-server and the attnscope CLI on Debian 12.
#
#   DOCKER_BUILDKIT=1 docker build -t attnscope .      (BuildKit: the default since Docker 23)
#   docker run -p 50051:50051 -p 8080:8080 -p 9464:9464 attnscope
#   docker run -v /my/checkpoints:/models:ro -p 50051:50051 attnscope --model mine=/models/mine
#
# Ports: 50051 gRPC, 8080 HTTP/JSON API and dashboard, 9464 Prometheus /metrics. The built-in
# models are served from /opt/attnscope/models (--model_repository); arguments after the image name
# add to the flags below, and a later flag wins, so `--model NAME=/models/DIR` serves a mounted
# checkpoint beside the built-in ones and `--model_repository=/models` serves the mounted folder
# instead of them. docs/deploy.md, "Docker", says more.
#
# The build stage runs the project's own scripts, the same as CI and the README:
# scripts/install-deps.sh is the one list of Debian packages and scripts/build.sh the one build
# command, here with --build-only and --shipped (the build's packages only, no test tool; the
# shipped targets only).
# tests/integration/dockerfile_test.cc fails when this file runs a cmake or apt-get line of its own
# there, and when the runtime packages below stop matching what the binaries link.
#
# The compile cache and npm's download cache are BuildKit cache mounts, kept by the engine between
# builds, so that a rebuild after a change recompiles only what changed: BuildKit is the default
# builder since Docker 23; with Debian 12's docker.io (20.10) and docker-compose 1.29, set
# DOCKER_BUILDKIT=1 (and COMPOSE_DOCKER_CLI_BUILD=1 for docker-compose). scripts/docker-check.sh
# builds, runs and checks the image on a real engine.

FROM debian:12.11-slim AS build
WORKDIR /src
# The dependencies in a layer of their own, rebuilt only when the script changes.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build-only && rm -rf /var/lib/apt/lists/*
COPY . .
# The shipped targets, then the image's tree: every folder of checkpoints/ that holds a config.json
# (the built-in models), the dashboard's files (build/dashboard), and the packages that own the
# libraries the binaries load, for the runtime stage. Behind a proxy that inspects TLS, npm needs
# the machine's certificate authorities: `--secret id=ca-certificates,src=FILE` (docker-check.sh
# passes /etc/ssl/certs/ca-certificates.crt); without it, Node's own.
RUN --mount=type=cache,target=/root/.cache/ccache --mount=type=cache,target=/root/.npm \
    --mount=type=secret,id=ca-certificates \
    if [ -f /run/secrets/ca-certificates ]; then \
      export NODE_EXTRA_CA_CERTS=/run/secrets/ca-certificates; \
    fi \
 && bash scripts/build.sh --shipped \
 && mkdir -p /opt/attnscope/models /opt/attnscope/dashboard \
 && for dir in checkpoints/*/; do \
      if [ -f "$dir/config.json" ]; then cp -r "$dir" /opt/attnscope/models/; fi; \
    done \
 && cp -r build/dashboard/. /opt/attnscope/dashboard/ \
 && bash scripts/linked-packages.sh build/server/attnscope-server build/client/attnscope \
      build/lib/libattnscope_sentencepiece.so >/src/linked-packages.txt

FROM debian:12.11-slim
# Exactly the packages that own the libraries `ldd` lists for the two binaries and the
# SentencePiece module, and tini (below) (libopenblas0-pthread provides libblas.so.3: without it apt would pick the
# reference BLAS, about 60 times slower); their own dependencies come with them. Many of those
# (libtorch1.13's: Mesa's GL drivers with LLVM, Z3, GDAL's and PROJ's data, fonts, XKB data, about
# 250 MB) own no library the binaries load, which the build stage listed (linked-packages.txt, from
# scripts/linked-packages.sh): they are removed in the same layer, so that the image never holds
# them. dpkg then records their dependents' dependencies as unmet; a derived image that installs
# more with apt runs `apt-get install -f` first. apt-get clean: a base made by mmdebstrap, unlike
# Debian's images, keeps the downloaded packages.
COPY --from=build /src/linked-packages.txt /tmp/linked-packages.txt
RUN dpkg-query -W -f='${Package}\n' | sort >/tmp/base-packages.txt \
 && apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      libabsl20220623 libdnnl2 libgrpc++1.51 libgrpc29 libopenblas0-pthread \
      libprometheus-cpp-core1.0 libprotobuf32 libsentencepiece0 libssl3 libtorch1.13 \
      libutf8proc2 libzip4 tini \
 && rm -rf /var/lib/apt/lists/* \
 && apt-get clean \
 && dpkg-query -W -f='${Package}\n' | sort | comm -23 - /tmp/base-packages.txt \
    | comm -23 - /tmp/linked-packages.txt | grep -vx tini >/tmp/unused-packages.txt \
 && xargs -r dpkg --purge --force-depends </tmp/unused-packages.txt \
 && rm /tmp/base-packages.txt /tmp/linked-packages.txt /tmp/unused-packages.txt
# A fixed numeric uid, so that Kubernetes' runAsNonRoot can verify it (deploy/k8s uses the same).
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin attnscope
# The module is found in ../lib next to the executable (models/tokenizers/sentencepiece_bridge.cc).
COPY --from=build /src/build/server/attnscope-server /src/build/client/attnscope /usr/local/bin/
COPY --from=build /src/build/lib/libattnscope_sentencepiece.so /usr/local/lib/
COPY --from=build /opt/attnscope/ /opt/attnscope/
USER 10001:10001
EXPOSE 50051 8080 9464
# Model loading and warm-up take seconds; the CLI exits 0 only when the server reports SERVING.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["attnscope", "health", "--server", "127.0.0.1:50051"]
# tini as PID 1 passes signals on to the server. The kernel drops a signal sent to a container's
# PID 1 that has no handler for it, and the server blocks SIGTERM only once its main() runs, after
# the dynamic loader has mapped LibTorch (seconds on a busy machine): without tini a `docker stop`
# in that time would be lost and the container killed 10 s later. Under tini the server dies of it
# at once (exit 143); once it runs, SIGTERM drains it and it exits 0.
ENTRYPOINT ["tini", "--", "attnscope-server", "--listen=0.0.0.0:50051", \
            "--http_listen=0.0.0.0:8080", "--metrics_port=9464", \
            "--dashboard_dir=/opt/attnscope/dashboard", "--model_repository=/opt/attnscope/models"]
