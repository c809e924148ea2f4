#!/usr/bin/env bash
# deps.sh [main|python|test|docs|compose]: installs the Debian 12 packages one job needs.
#   main (the default): build feedd, feed-bench and the tools, run them, plot
#                       (what scripts/main.sh runs)
#   python: main's packages plus what the feedclient package needs in a venv
#           (Debian's torch, venv, setuptools and wheel for pip's offline build)
#   test: main's packages plus what the test suite runs (cmocka, the interop
#         clients' grpcio and node/npm, the PyTorch package's torch and pytest,
#         scipy for the augmentations' distribution tests, iproute2 for the
#         network-namespace test)
#   docs: Debian's mkdocs, for the documentation site (scripts/docs.sh)
#   compose: rootful podman for deploy/compose-test.sh (scripts/compose-ci.sh)
# Run as root; does nothing for packages already present.
set -euo pipefail

main_pkgs=(build-essential cmake pkg-config
           libjpeg62-turbo-dev libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
           libmicrohttpd-dev libcurl4-openssl-dev libssl-dev python3 python3-numpy python3-matplotlib)
test_pkgs=(git libcmocka-dev
           python3-grpcio python3-grpc-tools python3-protobuf nodejs npm
           python3-torch python3-torchvision python3-pytest python3-pil python3-scipy
           python3-venv python3-pip python3-setuptools openssl iproute2 mkdocs)
python_pkgs=(python3-torch python3-venv python3-setuptools python3-wheel)
docs_pkgs=(mkdocs python3)
compose_pkgs=(podman runc netavark aardvark-dns iptables debootstrap podman-compose python3)

case "${1:-main}" in
  main) pkgs=("${main_pkgs[@]}") ;;
  python) pkgs=("${main_pkgs[@]}" "${python_pkgs[@]}") ;;
  test) pkgs=("${main_pkgs[@]}" "${python_pkgs[@]}" "${test_pkgs[@]}") ;;
  docs) pkgs=("${docs_pkgs[@]}") ;;
  compose) pkgs=("${compose_pkgs[@]}") ;;
  -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "usage: scripts/deps.sh [main|python|test|docs|compose]" >&2; exit 2 ;;
esac
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
