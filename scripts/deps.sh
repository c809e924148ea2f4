#!/usr/bin/env bash
# Installs the Debian 12 packages feedd needs to build, test and plot.
# Run as root; does nothing for packages already present.
set -euo pipefail

pkgs=(build-essential cmake pkg-config git
      libjpeg62-turbo-dev libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
      libcmocka-dev libmicrohttpd-dev
      python3 python3-grpcio python3-grpc-tools python3-protobuf python3-numpy
      python3-matplotlib nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
# nodejs/npm may come from elsewhere on a developer machine: a working node+npm is enough.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps.sh: missing packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
