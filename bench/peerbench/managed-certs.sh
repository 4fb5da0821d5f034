#!/usr/bin/env bash
# Prepares the certificates of the tls-acme and tls-ocsp peerbench contestants (issue 16's
# benchmark) from peerbench's own ECDSA certificate (WORKDIR/ecdsa.crt, CN and SAN localhost):
# - WORKDIR/acme-state: that certificate stored as an ACME order's (the names
#   config::acme::cert_paths gives for domains = ["localhost"] and the directory below), so
#   tollgate loads it as ACME-managed (source `acme`) without a CA: it is valid for years, so
#   no renewal is due during a run.
# - WORKDIR/ocsp: a copy of it with CERT.ocsp beside it, a `good` OCSP response signed by the
#   (self-signed) certificate itself, valid for a day: stapled on every handshake.
# Usage (the contestants' check command): bench/peerbench/managed-certs.sh WORKDIR
set -euo pipefail
work=${1:?usage: managed-certs.sh WORKDIR}
crt=$work/ecdsa.crt key=$work/ecdsa.key
directory="https://127.0.0.1:9/directory"

mkdir -p -m 0700 "$work/acme-state"
hash=$(printf '%s\0%s' "$directory" localhost | sha256sum | cut -c1-8)
install -m 0600 "$crt" "$work/acme-state/localhost.$hash.crt"
install -m 0600 "$key" "$work/acme-state/localhost.$hash.key"

mkdir -p "$work/ocsp"
cp "$crt" "$work/ocsp/ecdsa.crt"
cp "$key" "$work/ocsp/ecdsa.key"
serial=$(openssl x509 -in "$crt" -noout -serial | cut -d= -f2)
enddate=$(date -u -d "$(openssl x509 -in "$crt" -noout -enddate | cut -d= -f2)" +%y%m%d%H%M%SZ)
printf 'V\t%s\t\t%s\tunknown\t/CN=localhost\n' "$enddate" "$serial" >"$work/ocsp/index.txt"
openssl ocsp -index "$work/ocsp/index.txt" -rsigner "$crt" -rkey "$key" -CA "$crt" \
    -issuer "$crt" -cert "$crt" -ndays 1 -respout "$work/ocsp/ecdsa.crt.ocsp" >/dev/null 2>&1
