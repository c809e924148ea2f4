# feed-bench and libfeedclient: the GPU training-host side.
# BASE picks the image: a CUDA devel image on GPU hosts (the default), plain
# Debian for a host-only run (the compose test on machines without a GPU):
#   docker build -f docker/bench.Dockerfile -t feed-bench .
#   docker build -f docker/bench.Dockerfile --build-arg BASE=debian:bookworm-slim -t feed-bench-cpu .
# CUDA 12.8 (CUDA 13 no longer compiles for Volta, sm_70), building
# machine code for Volta, Turing, Ampere, Ada and Hopper, and Hopper's PTX
# for newer GPUs. It needs an NVIDIA driver of the R570 series or newer on the
# host (the CUDA image's NVIDIA_REQUIRE_CUDA=cuda>=12.8 is checked by the
# container toolkit). CUDA_ARCHS is ignored on a BASE without nvcc.
ARG BASE=nvidia/cuda:12.8.1-devel-ubuntu24.04
FROM ${BASE}
ARG CUDA_ARCHS="70-real;75-real;80-real;86-real;89-real;90"
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config libjpeg-dev libgrpc-dev protobuf-c-compiler \
        libprotobuf-c-dev libmicrohttpd-dev libcurl4-openssl-dev libssl-dev python3 python3-matplotlib \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DFEED_BUILD_TESTS=OFF \
        -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS}" \
    && cmake --build /build -j"$(nproc)" \
    && cmake --install /build --prefix /usr/local \
    && ln -sf /build/bench/e2e/feed-bench /build/server/tools/feed-gen-dataset /build/server/feedd \
             /usr/local/bin/ \
    && cp docker/run-bench.sh /usr/local/bin/
ENTRYPOINT ["run-bench.sh"]
