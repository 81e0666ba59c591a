# attnscope-server image: Debian 12 with the project's own dependency script, Release build.
# Build: docker build -t attnscope .   Run: docker run -p 50051:50051 -p 9464:9464 attnscope
FROM debian:12 AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
 && cmake --build build -j"$(nproc)" --target attnscope-server attnscope

FROM debian:12
# Runtime libraries only: the -dev packages' shared-library dependencies.
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      libtorch1.13 libopenblas0-pthread libdnnl2 libgrpc++1.51 libprotobuf32 \
      libabsl20220623 libprometheus-cpp-pull1.0 libprometheus-cpp-core1.0 libutf8proc2 \
      libsentencepiece0 libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/server/attnscope-server /src/build/client/attnscope /usr/local/bin/
COPY --from=build /src/build/lib/libattnscope_sentencepiece.so /usr/local/lib/
COPY models/ /opt/attnscope/models/
ENV ATTNSCOPE_SENTENCEPIECE_MODULE=/usr/local/lib/libattnscope_sentencepiece.so
EXPOSE 50051 9464
ENTRYPOINT ["attnscope-server", "--listen=0.0.0.0:50051", "--metrics_port=9464"]
CMD ["--model_repository=/opt/attnscope/models"]
