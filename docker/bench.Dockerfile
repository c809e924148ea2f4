# feed-bench and libfeedclient: the GPU training-host side.
# BASE picks the image: a CUDA devel image on GPU hosts (the default), plain
# Debian for a host-only run (the compose test on machines without a GPU):
#   docker build -f docker/bench.Dockerfile -t feed-bench .
#   docker build -f docker/bench.Dockerfile --build-arg BASE=debian:bookworm-slim -t feed-bench .
ARG BASE=nvidia/cuda:13.0.0-devel-ubuntu24.04
FROM ${BASE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config libjpeg-dev libgrpc-dev protobuf-c-compiler \
        libprotobuf-c-dev libmicrohttpd-dev python3 python3-matplotlib \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DFEED_BUILD_TESTS=OFF \
    && cmake --build /build -j"$(nproc)" \
    && cmake --install /build --prefix /usr/local \
    && ln -sf /build/bench/e2e/feed-bench /build/server/tools/feed-gen-dataset /build/server/feedd \
             /usr/local/bin/ \
    && cp docker/run-bench.sh /usr/local/bin/
ENTRYPOINT ["run-bench.sh"]
