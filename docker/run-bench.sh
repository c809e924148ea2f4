#!/bin/sh
# Container entrypoint for feed-bench: the same data as the feedd containers
# ($FEED_DATA_PATH, or the embedded default dataset generated identically
# here). Arguments go to feed-bench (e.g. --servers feedd-1:7878,feedd-2:7878).
set -e
data=${FEED_DATA_PATH:-}
if [ -z "$data" ] || [ "$data" = default ]; then
  data=/tmp/default
  feed-gen-dataset "$data" --classes 10 --per-class 64 > /dev/null
fi
exec feed-bench --data "$data" "$@"
