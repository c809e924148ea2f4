#!/usr/bin/env bash
# promtool.sh CACHE_DIR: checks deploy/monitoring's alert rules with
# Prometheus's promtool (syntax, and the rules' unit tests). Not
# prometheus.yml: Debian's Prometheus is built without Kubernetes service
# discovery, so its promtool refuses kubernetes_sd_configs; validate.mjs
# checks that file's structure instead. promtool comes from Debian's
# prometheus package, unpacked into CACHE_DIR without installing it (the
# package would start a Prometheus server); skips, saying why, when the
# package cannot be fetched.
set -uo pipefail
cache=$1
here=$(cd "$(dirname "$0")" && pwd)
mon=$here/../../deploy/monitoring
promtool=$cache/promtool-root/usr/bin/promtool
if [ ! -x "$promtool" ]; then
  mkdir -p "$cache/promtool-dl"
  if ! (cd "$cache/promtool-dl" && apt-get download prometheus > download.log 2>&1); then
    echo "SKIP: promtool: 'apt-get download prometheus' failed: $(tail -n 1 "$cache/promtool-dl/download.log")"
    exit 77
  fi
  dpkg-deb -x "$(ls "$cache"/promtool-dl/prometheus_*.deb | head -n 1)" "$cache/promtool-root" || exit 1
fi
set -e
cd "$mon"
"$promtool" --version | head -n 1
"$promtool" check rules feedd-alerts.yml
"$promtool" test rules feedd-alerts.test.yml
