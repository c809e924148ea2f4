#!/bin/sh
# Container entrypoint for feedd: serves $FEED_DATA_PATH (an ImageFolder tree
# or pack mounted into the container) as dataset "bench", or, when it is
# unset or "default", the embedded default dataset generated here (deterministic: every
# container gets the same bytes). Arguments go to feedd.
set -e
data=${FEED_DATA_PATH:-}
if [ -z "$data" ] || [ "$data" = default ]; then
  data=/tmp/default
  feed-gen-dataset "$data" --classes 10 --per-class 64 > /dev/null
fi
exec feedd --listen 0.0.0.0:7878 --metrics-listen 0.0.0.0:9878 --dataset "bench=$data" "$@"
