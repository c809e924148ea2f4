# feedd: the preprocessing server, for CPU hosts.
#   docker build -f docker/feedd.Dockerfile -t feedd .
#   docker run -p 7878:7878 -p 9878:9878 -v /srv/imagenet:/data:ro \
#       -e FEED_DATA_PATH=/data/train.pack feedd
#   docker run --entrypoint feedd feedd --dataset imagenet=/data/train ...   (any flags)
FROM debian:bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config libjpeg-dev libgrpc-dev protobuf-c-compiler \
        libprotobuf-c-dev libmicrohttpd-dev libcurl4-openssl-dev libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY proto proto
COPY common common
COPY source source
COPY server server
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DFEED_CUDA=OFF -DFEED_BUILD_TESTS=OFF \
    && cmake --build /build -j"$(nproc)" --target feedd feed-pack feed-gen-dataset

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
        libjpeg62-turbo libgrpc29 libprotobuf-c1 libmicrohttpd12 libcurl4 libssl3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /build/server/feedd /build/server/tools/feed-pack \
     /build/server/tools/feed-gen-dataset /usr/local/bin/
COPY docker/run-feedd.sh /usr/local/bin/
USER nobody
EXPOSE 7878 9878
# Serves $FEED_DATA_PATH as dataset "bench", or the generated default dataset.
ENTRYPOINT ["run-feedd.sh"]
