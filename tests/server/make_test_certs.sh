#!/usr/bin/env bash
# make_test_certs.sh DIR: throwaway certificates for the trust tests, made at
# test time and never committed. Two CAs: "ca" signs server.pem (for
# 127.0.0.1 and localhost) and client.pem; "other-ca" signs other-server.pem
# and other-client.pem, which the first CA's peers must refuse; expired.pem
# (signed by "ca") ended a day ago. EC P-256 keys, the rest valid for two
# days.
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
ca() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=feedd test $1" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
leaf() { # leaf NAME CA USAGE [DAYS]
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
    -days "${4:-2}" -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca
ca other-ca
leaf server ca serverAuth
leaf client ca clientAuth
leaf other-server other-ca serverAuth
leaf other-client other-ca clientAuth
leaf expired ca serverAuth -1
